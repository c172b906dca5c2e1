//! Finding and validating a device-networking table (`ferrocx_devnet_v1`),
//! built in or in a `.so` that may export other tables too.

use crate::error::Result;
use crate::plugin::library::{check_header, check_hooks, table_from_library, TableKind};
use crate::plugin::PluginSource;
use ferrocx_sdk::abi::*;
use std::path::Path;
use std::sync::Arc;

/// A validated devnet table and what keeps it alive.
pub struct DevnetLib {
    table: FxDevnetV1,
    _lib: Option<Arc<libloading::Library>>,
    /// Plugin name from the table.
    pub name: String,
    /// ABI version of the table.
    pub abi_version: u32,
    /// Where it came from.
    pub source: PluginSource,
}

// SAFETY: the table is a copy of immutable data whose hooks point into the
// library, which stays loaded while this value lives; the hooks' threading is
// the ABI's contract.
unsafe impl Send for DevnetLib {}
// SAFETY: as above.
unsafe impl Sync for DevnetLib {}

const KIND: TableKind = TableKind {
    what: "device-networking",
    symbol: FX_DEVNET_SYMBOL_V1,
    version: FX_DEVNET_ABI_VERSION_1,
    min_size: std::mem::size_of::<FxDevnetV1>(),
};

impl DevnetLib {
    /// The table (valid while `self` lives).
    pub fn table(&self) -> &FxDevnetV1 {
        &self.table
    }

    /// Wrap a built-in table.
    pub fn builtin(table: &'static FxDevnetV1) -> Result<Self> {
        // SAFETY: a 'static reference is a valid table pointer.
        unsafe { Self::validate(table, None, PluginSource::Builtin, "builtin") }
    }

    /// The devnet table of an opened library; `None` when it exports none.
    pub fn from_library(lib: &Arc<libloading::Library>, path: &Path) -> Option<Result<Self>> {
        // SAFETY: the symbol is documented as `const fx_devnet_v1_t *(*)(void)`, its
        // table living as long as the library.
        unsafe { table_from_library(lib, path, FX_DEVNET_SYMBOL_V1, Self::validate) }
    }

    /// # Safety
    /// `table` must be null or point to readable memory of at least the header's size.
    unsafe fn validate(
        table: *const FxDevnetV1,
        lib: Option<Arc<libloading::Library>>,
        source: PluginSource,
        shown: &str,
    ) -> Result<Self> {
        // SAFETY: the caller's contract.
        let (version, name) = unsafe { check_header(table.cast(), &KIND, shown)? };
        // SAFETY: the header check passed: the whole v1 table is readable.
        let t = unsafe { std::ptr::read(table) };
        check_hooks(
            &KIND,
            &name,
            shown,
            &[
                ("init", t.init.is_none()),
                ("finalize", t.finalize.is_none()),
                ("comm_init", t.comm_init.is_none()),
                ("comm_destroy", t.comm_destroy.is_none()),
                ("window_register", t.window_register.is_none()),
                ("window_deregister", t.window_deregister.is_none()),
                ("device_view", t.device_view.is_none()),
                ("status", t.status.is_none()),
                ("stats", t.stats.is_none()),
                ("describe", t.describe.is_none()),
            ],
        )?;
        Ok(DevnetLib {
            table: t,
            _lib: lib,
            name,
            abi_version: version,
            source,
        })
    }
}
