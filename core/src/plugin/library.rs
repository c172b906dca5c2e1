//! Finding and validating a plugin table: built-ins and `.so` files.

use crate::error::{Error, Result};
use ferrocx_sdk::abi::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Linked into this binary.
    Builtin,
    /// Loaded with `dlopen` from this file.
    File(PathBuf),
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Builtin => write!(f, "builtin"),
            PluginSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A validated transport table and what keeps it alive.
pub struct PluginLib {
    table: *const FxTransportV1,
    /// Keeps the `.so` mapped as long as the table is used.
    _lib: Option<Arc<libloading::Library>>,
    /// Plugin name from the table.
    pub name: String,
    /// ABI version of the table.
    pub abi_version: u32,
    /// Where it came from.
    pub source: PluginSource,
}

// SAFETY: the table is immutable static data of the library, which stays
// loaded while this value lives; the hooks are thread-safe per the ABI contract.
unsafe impl Send for PluginLib {}
// SAFETY: as above.
unsafe impl Sync for PluginLib {}

impl PluginLib {
    /// The raw table (valid while `self` lives), for conformance tools that
    /// must call hooks with deliberately bad arguments.
    pub fn table(&self) -> &FxTransportV1 {
        // SAFETY: validated non-null at construction and kept alive by `_lib`.
        unsafe { &*self.table }
    }

    /// Capability bits.
    pub fn caps(&self) -> u64 {
        self.table().caps
    }

    /// Wrap a built-in table.
    pub fn builtin(table: &'static FxTransportV1) -> Result<Self> {
        // SAFETY: a 'static reference is a valid table pointer.
        unsafe { Self::validate(table, None, PluginSource::Builtin, "builtin") }
    }

    /// `dlopen` a file and validate its `ferrocx_transport_v1` table.
    pub fn load(path: &Path) -> Result<Self> {
        let lib = open_library(path)?;
        Self::from_library(&lib, path).unwrap_or_else(|| {
            Err(Error::PluginLoad {
                path: path.display().to_string(),
                message: format!("no symbol '{FX_SYMBOL_V1}': not a ferrocx transport plugin (or built for another ABI)"),
            })
        })
    }

    /// The transport table of an opened library; `None` when it exports none
    /// (it may be a collective plugin only).
    pub fn from_library(lib: &Arc<libloading::Library>, path: &Path) -> Option<Result<Self>> {
        // SAFETY: the symbol is documented as `const fx_transport_v1_t *(*)(void)`,
        // its table living as long as the library.
        unsafe { table_from_library(lib, path, FX_SYMBOL_V1, Self::validate) }
    }

    /// # Safety
    /// `table` must be null or point to readable memory of at least the header's size.
    unsafe fn validate(
        table: *const FxTransportV1,
        lib: Option<Arc<libloading::Library>>,
        source: PluginSource,
        shown: &str,
    ) -> Result<Self> {
        let kind = TableKind {
            what: "transport",
            symbol: FX_SYMBOL_V1,
            version: FX_ABI_VERSION_1,
            min_size: FX_TRANSPORT_V1_MIN_SIZE,
        };
        let (version, name) = check_header(table.cast(), &kind, shown)?;
        let t = &*table;
        check_hooks(
            &kind,
            &name,
            shown,
            &[
                ("init", t.init.is_none()),
                ("finalize", t.finalize.is_none()),
                ("can_connect", t.can_connect.is_none()),
                ("setup", t.setup.is_none()),
                ("connect", t.connect.is_none()),
                ("isend", t.isend.is_none()),
                ("irecv", t.irecv.is_none()),
                ("test", t.test.is_none()),
                ("free", t.free.is_none()),
            ],
        )?;
        Ok(PluginLib {
            table,
            _lib: lib,
            name,
            abi_version: version,
            source,
        })
    }
}

/// `dlopen` a plugin file (once for every kind of table it exports).
pub fn open_library(path: &Path) -> Result<Arc<libloading::Library>> {
    let err = |message: String| Error::PluginLoad {
        path: path.display().to_string(),
        message,
    };
    if !path.exists() {
        return Err(err("no such file".into()));
    }
    // SAFETY: loading a library runs its initializers; that is what loading
    // a plugin means, and the user asked for this file.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| err(format!("dlopen failed: {e}")))?;
    Ok(Arc::new(lib))
}

/// What identifies one kind of plugin table, for the checks every kind shares.
pub(crate) struct TableKind {
    /// "transport" or "collective", for messages.
    pub what: &'static str,
    /// The exported symbol.
    pub symbol: &'static str,
    /// The ABI version this core knows.
    pub version: u32,
    /// That version's `struct_size`.
    pub min_size: usize,
}

/// The header every plugin table starts with (both ABIs put these fields first).
#[repr(C)]
struct TableHeader {
    abi_version: u32,
    struct_size: u32,
    name: [std::ffi::c_char; FX_NAME_BYTES],
}

/// Call the entry point `symbol` of `lib`: `None` when the library lacks it.
///
/// # Safety
/// `symbol` must be a function `const T *(*)(void)`, as the ABI documents it.
pub(crate) unsafe fn table_of<T>(lib: &libloading::Library, symbol: &str) -> Option<*const T> {
    // SAFETY: the caller's contract on the symbol's type.
    unsafe {
        let entry: libloading::Symbol<unsafe extern "C" fn() -> *const T> =
            lib.get(symbol.as_bytes()).ok()?;
        Some(entry())
    }
}

/// The `validate` function of a table kind: the table, the library keeping
/// it alive, where it came from, and how to name it in errors.
pub(crate) type Validate<T, L> =
    unsafe fn(*const T, Option<Arc<libloading::Library>>, PluginSource, &str) -> Result<L>;

/// The table an opened library exports as `symbol`, validated; `None` when
/// it exports none (it may be a plugin of another kind only).
///
/// # Safety
/// `symbol` must be a `const T *(*)(void)` entry point whose table lives as
/// long as the library, and `validate` sound for such a table.
pub(crate) unsafe fn table_from_library<T, L>(
    lib: &Arc<libloading::Library>,
    path: &Path,
    symbol: &str,
    validate: Validate<T, L>,
) -> Option<Result<L>> {
    // SAFETY: the caller's contract on the symbol's type.
    let table = unsafe { table_of::<T>(lib, symbol)? };
    // SAFETY: the caller's contract: the table lives as long as the library.
    Some(unsafe {
        validate(
            table,
            Some(lib.clone()),
            PluginSource::File(path.to_path_buf()),
            &path.display().to_string(),
        )
    })
}

/// Check a table's header — not null, known version, large enough, a name —
/// before anything past it is read; returns the version and the name.
///
/// # Safety
/// `table` must be null or point to readable memory of at least the header's size.
pub(crate) unsafe fn check_header(
    table: *const u8,
    kind: &TableKind,
    shown: &str,
) -> Result<(u32, String)> {
    let err = |message: String| Error::PluginLoad {
        path: shown.to_string(),
        message,
    };
    let sym = kind.symbol;
    if table.is_null() {
        return Err(err(format!("'{sym}' returned a null table")));
    }
    let h = table as *const TableHeader;
    // SAFETY: the caller's contract: the header is readable; fields are read one by one.
    let (version, size) = unsafe {
        (
            std::ptr::read(std::ptr::addr_of!((*h).abi_version)),
            std::ptr::read(std::ptr::addr_of!((*h).struct_size)) as usize,
        )
    };
    if version != kind.version {
        return Err(err(format!(
            "symbol '{sym}' has abi_version {version}, but this core knows {} ABI version {}",
            kind.what, kind.version
        )));
    }
    if size < kind.min_size {
        return Err(err(format!(
            "symbol '{sym}' has struct_size {size}, smaller than the {} bytes of {} ABI v{}",
            kind.min_size, kind.what, kind.version
        )));
    }
    // SAFETY: the size check passed: the whole header (and more) is readable.
    let name_chars = unsafe { std::ptr::read(std::ptr::addr_of!((*h).name)) };
    let name = c_chars_to_string(&name_chars);
    if name.is_empty() || !name_chars.contains(&0) {
        return Err(err("plugin name is empty or not NUL-terminated".into()));
    }
    Ok((version, name))
}

/// Fail naming every required hook that is null (`(hook, is_null)` pairs).
pub(crate) fn check_hooks(
    kind: &TableKind,
    name: &str,
    shown: &str,
    hooks: &[(&str, bool)],
) -> Result<()> {
    let missing: Vec<&str> = hooks.iter().filter(|(_, m)| *m).map(|(n, _)| *n).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::PluginLoad {
        path: shown.to_string(),
        message: format!(
            "{} plugin '{name}' lacks required hooks: {}",
            kind.what,
            missing.join(", ")
        ),
    })
}

/// A plugin's `last_error` text for the calling thread ("(the plugin gave no
/// error text)" when it has no hook or says nothing).
pub(crate) fn last_error_text(
    hook: Option<unsafe extern "C" fn(*mut std::ffi::c_char, usize) -> usize>,
) -> String {
    let mut message = String::new();
    if let Some(last) = hook {
        let mut buf = vec![0 as std::ffi::c_char; 1024];
        // SAFETY: a buffer of the given length.
        unsafe { last(buf.as_mut_ptr(), buf.len()) };
        message = c_chars_to_string(&buf);
    }
    if message.is_empty() {
        message = "(the plugin gave no error text)".into();
    }
    message
}
