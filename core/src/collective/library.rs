//! Finding and validating a collective plugin table (`ferrocx_collective_v1`),
//! built in or in a `.so` that may export a transport table too.

use crate::error::{Error, Result};
use crate::plugin::PluginSource;
use ferrocx_sdk::abi::*;
use std::path::Path;
use std::sync::Arc;

/// A validated collective table and what keeps it alive.
pub struct CollectiveLib {
    table: *const FxCollectiveV1,
    _lib: Option<Arc<libloading::Library>>,
    /// Plugin name from the table.
    pub name: String,
    /// ABI version of the table.
    pub abi_version: u32,
    /// Where it came from.
    pub source: PluginSource,
}

// SAFETY: the table is immutable static data of the library, which stays
// loaded while this value lives; the hooks' threading is the ABI's contract.
unsafe impl Send for CollectiveLib {}
// SAFETY: as above.
unsafe impl Sync for CollectiveLib {}

impl CollectiveLib {
    /// The raw table (valid while `self` lives).
    pub fn table(&self) -> &FxCollectiveV1 {
        // SAFETY: validated non-null at construction and kept alive by `_lib`.
        unsafe { &*self.table }
    }

    /// Wrap a built-in table.
    pub fn builtin(table: &'static FxCollectiveV1) -> Result<Self> {
        // SAFETY: a 'static reference is a valid table pointer.
        unsafe { Self::validate(table, None, PluginSource::Builtin, "builtin") }
    }

    /// The collective table of an opened library; `None` when it exports none.
    pub fn from_library(lib: &Arc<libloading::Library>, path: &Path) -> Option<Result<Self>> {
        // SAFETY: the symbol is documented as `const fx_collective_v1_t *(*)(void)`.
        let table = unsafe {
            let entry: libloading::Symbol<FxCollectiveV1Entry> =
                lib.get(FX_COLL_SYMBOL_V1.as_bytes()).ok()?;
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
        table: *const FxCollectiveV1,
        lib: Option<Arc<libloading::Library>>,
        source: PluginSource,
        shown: &str,
    ) -> Result<Self> {
        let err = |message: String| Error::PluginLoad {
            path: shown.to_string(),
            message,
        };
        if table.is_null() {
            return Err(err(format!("'{FX_COLL_SYMBOL_V1}' returned a null table")));
        }
        // Only the header is trusted before the size check.
        let version = std::ptr::read(std::ptr::addr_of!((*table).abi_version));
        let size = std::ptr::read(std::ptr::addr_of!((*table).struct_size)) as usize;
        if version != FX_COLL_ABI_VERSION_1 {
            return Err(err(format!(
                "symbol '{FX_COLL_SYMBOL_V1}' has abi_version {version}, but this core knows collective ABI version {FX_COLL_ABI_VERSION_1}"
            )));
        }
        if size < FX_COLLECTIVE_V1_MIN_SIZE {
            return Err(err(format!(
                "symbol '{FX_COLL_SYMBOL_V1}' has struct_size {size}, smaller than the {FX_COLLECTIVE_V1_MIN_SIZE} bytes of collective ABI v{FX_COLL_ABI_VERSION_1}"
            )));
        }
        let t = &*table;
        let name = t.name_str();
        if name.is_empty() || !t.name.contains(&0) {
            return Err(err("plugin name is empty or not NUL-terminated".into()));
        }
        let mut missing: Vec<&str> = [
            ("init", t.init.is_none()),
            ("finalize", t.finalize.is_none()),
            ("comm_init", t.comm_init.is_none()),
            ("comm_destroy", t.comm_destroy.is_none()),
            ("can_run", t.can_run.is_none()),
            ("launch", t.launch.is_none()),
        ]
        .iter()
        .filter(|(_, m)| *m)
        .map(|(n, _)| *n)
        .collect();
        if t.window_register.is_some() && t.window_deregister.is_none() {
            missing.push("window_deregister (required with window_register)");
        }
        if !missing.is_empty() {
            return Err(err(format!(
                "collective plugin '{name}' lacks required hooks: {}",
                missing.join(", ")
            )));
        }
        Ok(CollectiveLib {
            table,
            _lib: lib,
            name,
            abi_version: version,
            source,
        })
    }
}
