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
        // SAFETY: the symbol is documented as `const fx_transport_v1_t *(*)(void)`.
        let table = unsafe {
            let entry: libloading::Symbol<FxTransportV1Entry> =
                lib.get(FX_SYMBOL_V1.as_bytes()).ok()?;
            entry()
        };
        // SAFETY: the entry point promises a table living as long as the library.
        Some(unsafe {
            Self::validate(
                table,
                Some(lib.clone()),
                PluginSource::File(path.to_path_buf()),
                &path.display().to_string(),
            )
        })
    }

    /// # Safety
    /// `table` must be null or point to readable memory of at least the header's size.
    unsafe fn validate(
        table: *const FxTransportV1,
        lib: Option<Arc<libloading::Library>>,
        source: PluginSource,
        shown: &str,
    ) -> Result<Self> {
        let err = |message: String| Error::PluginLoad {
            path: shown.to_string(),
            message,
        };
        if table.is_null() {
            return Err(err(format!("'{FX_SYMBOL_V1}' returned a null table")));
        }
        // Read the header fields first: nothing past them is trusted before the size check.
        let version = std::ptr::read(std::ptr::addr_of!((*table).abi_version));
        let size = std::ptr::read(std::ptr::addr_of!((*table).struct_size)) as usize;
        if version != FX_ABI_VERSION_1 {
            return Err(err(format!(
                "symbol '{FX_SYMBOL_V1}' has abi_version {version}, but this core knows ABI version {FX_ABI_VERSION_1}"
            )));
        }
        if size < FX_TRANSPORT_V1_MIN_SIZE {
            return Err(err(format!(
                "symbol '{FX_SYMBOL_V1}' has struct_size {size}, smaller than the {FX_TRANSPORT_V1_MIN_SIZE} bytes of ABI v{FX_ABI_VERSION_1}"
            )));
        }
        let t = &*table;
        let name = t.name_str();
        if name.is_empty() || !t.name.contains(&0) {
            return Err(err("plugin name is empty or not NUL-terminated".into()));
        }
        let missing: Vec<&str> = [
            ("init", t.init.is_none()),
            ("finalize", t.finalize.is_none()),
            ("can_connect", t.can_connect.is_none()),
            ("setup", t.setup.is_none()),
            ("connect", t.connect.is_none()),
            ("isend", t.isend.is_none()),
            ("irecv", t.irecv.is_none()),
            ("test", t.test.is_none()),
            ("free", t.free.is_none()),
        ]
        .iter()
        .filter(|(_, m)| *m)
        .map(|(n, _)| *n)
        .collect();
        if !missing.is_empty() {
            return Err(err(format!(
                "plugin '{name}' lacks required hooks: {}",
                missing.join(", ")
            )));
        }
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
