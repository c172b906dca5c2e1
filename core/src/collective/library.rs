//! Finding and validating a collective plugin table (`ferrocx_collective_v1`),
//! built in or in a `.so` that may export a transport table too.

use crate::error::Result;
use crate::plugin::library::{check_header, check_hooks, table_of, TableKind};
use crate::plugin::PluginSource;
use ferrocx_sdk::abi::*;
use std::path::Path;
use std::sync::Arc;

/// A validated collective table and what keeps it alive.
pub struct CollectiveLib {
    /// A copy of the plugin's table, its `struct_size` bytes and zeros after
    /// them: a table built before hooks were added within v1 reads as not
    /// having them (never reading past what the plugin allocated).
    table: Box<FxCollectiveV1>,
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
unsafe impl Send for CollectiveLib {}
// SAFETY: as above.
unsafe impl Sync for CollectiveLib {}

impl CollectiveLib {
    /// The table (valid while `self` lives).
    pub fn table(&self) -> &FxCollectiveV1 {
        &self.table
    }

    /// Wrap a built-in table.
    pub fn builtin(table: &'static FxCollectiveV1) -> Result<Self> {
        // SAFETY: a 'static reference is a valid table pointer.
        unsafe { Self::validate(table, None, PluginSource::Builtin, "builtin") }
    }

    /// The collective table of an opened library; `None` when it exports none.
    pub fn from_library(lib: &Arc<libloading::Library>, path: &Path) -> Option<Result<Self>> {
        // SAFETY: the symbol is documented as `const fx_collective_v1_t *(*)(void)`.
        let table = unsafe { table_of::<FxCollectiveV1>(lib, FX_COLL_SYMBOL_V1)? };
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
        let kind = TableKind {
            what: "collective",
            symbol: FX_COLL_SYMBOL_V1,
            version: FX_COLL_ABI_VERSION_1,
            min_size: FX_COLLECTIVE_V1_MIN_SIZE,
        };
        // SAFETY: the caller's contract.
        let (version, name) = unsafe { check_header(table.cast(), &kind, shown)? };
        // SAFETY: the header check passed: `struct_size` (at least the v1
        // minimum) bytes are readable; only as many as both sides know are
        // copied over zeros, and zero bytes are valid for every field (null
        // hooks are `None`, the name an empty string).
        let t: Box<FxCollectiveV1> = unsafe {
            let mut copy = Box::new(std::mem::MaybeUninit::<FxCollectiveV1>::zeroed());
            let size = ((*table).struct_size as usize).min(std::mem::size_of::<FxCollectiveV1>());
            std::ptr::copy_nonoverlapping(table.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), size);
            Box::from_raw(Box::into_raw(copy).cast::<FxCollectiveV1>())
        };
        check_hooks(
            &kind,
            &name,
            shown,
            &[
                ("init", t.init.is_none()),
                ("finalize", t.finalize.is_none()),
                ("comm_init", t.comm_init.is_none()),
                ("comm_destroy", t.comm_destroy.is_none()),
                ("can_run", t.can_run.is_none()),
                ("launch", t.launch.is_none()),
                (
                    "window_deregister (required with window_register)",
                    t.window_register.is_some() && t.window_deregister.is_none(),
                ),
                (
                    "p2p_can_run and p2p_launch (one without the other)",
                    t.p2p_can_run.is_some() != t.p2p_launch.is_some(),
                ),
            ],
        )?;
        Ok(CollectiveLib {
            table: t,
            _lib: lib,
            name,
            abi_version: version,
            source,
        })
    }
}
