//! Finding and validating a collective plugin table (`ferrocx_collective_v1`),
//! built in or in a `.so` that may export a transport table too.

use crate::error::Result;
use crate::plugin::library::{check_header, check_hooks, table_from_library, TableKind};
use crate::plugin::PluginSource;
use ferrocx_sdk::abi::*;
use std::path::Path;
use std::sync::Arc;

/// A validated collective table and what keeps it alive.
pub struct CollectiveLib {
    /// A copy of the plugin's table: the v1 minimum, then each hook added
    /// within v1 that its `struct_size` covers whole, the others `None`
    /// (never reading past what the plugin allocated).
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
        // SAFETY: the symbol is documented as `const fx_collective_v1_t *(*)(void)`, its
        // table living as long as the library.
        unsafe { table_from_library(lib, path, FX_COLL_SYMBOL_V1, Self::validate) }
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
        // minimum) bytes are readable.
        let t = unsafe { copy_table(table) };
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

/// `size_of` a table field's type, from a pointer to it (no read).
fn field_size<F>(_: *const F) -> usize {
    std::mem::size_of::<F>()
}

/// Whether a table of `struct_size` bytes holds the whole field at `offset`
/// of `len` bytes.
fn reaches(struct_size: usize, offset: usize, len: usize) -> bool {
    struct_size >= offset + len
}

/// A copy of a v1 table: its first [`FX_COLLECTIVE_V1_MIN_SIZE`] bytes, then
/// the hooks added within v1 (`p2p_can_run`, `p2p_launch`, `launch_bounded`,
/// `describe`), each read only
/// when `struct_size` covers all of it.
///
/// # Safety
/// `table` points to `struct_size` readable bytes, at least the v1 minimum.
unsafe fn copy_table(table: *const FxCollectiveV1) -> Box<FxCollectiveV1> {
    let mut copy = Box::new(std::mem::MaybeUninit::<FxCollectiveV1>::zeroed());
    // SAFETY: the caller's contract: the minimum is readable; the copy is a
    // whole table's size; zero bytes are valid for every field (null hooks
    // are `None`, the name an empty string).
    let mut t = unsafe {
        std::ptr::copy_nonoverlapping(
            table.cast::<u8>(),
            copy.as_mut_ptr().cast::<u8>(),
            FX_COLLECTIVE_V1_MIN_SIZE,
        );
        Box::from_raw(Box::into_raw(copy).cast::<FxCollectiveV1>())
    };
    // SAFETY: the caller's contract: the header is readable.
    let size = unsafe { std::ptr::read(std::ptr::addr_of!((*table).struct_size)) } as usize;
    macro_rules! appended {
        ($field:ident) => {
            // SAFETY: only the field's address is computed, nothing read.
            let at = unsafe { std::ptr::addr_of!((*table).$field) };
            if reaches(
                size,
                std::mem::offset_of!(FxCollectiveV1, $field),
                field_size(at),
            ) {
                // SAFETY: `struct_size` covers the whole field (the caller's
                // contract makes those bytes readable); C tables are aligned.
                t.$field = unsafe { std::ptr::read(at) };
            }
        };
    }
    appended!(p2p_can_run);
    appended!(p2p_launch);
    appended!(launch_bounded);
    appended!(describe);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_void;

    unsafe extern "C" fn init(_: *const FxHostV1, _: *mut *mut c_void) -> i32 {
        FX_OK
    }
    unsafe extern "C" fn one(_: *mut c_void) -> i32 {
        FX_OK
    }
    unsafe extern "C" fn comm_init(
        _: *mut c_void,
        _: *const FxCommInfo,
        _: *const FxCommOob,
        _: *mut *mut c_void,
    ) -> i32 {
        FX_OK
    }
    unsafe extern "C" fn can_run(_: *mut c_void, _: *const FxCollDesc) -> i32 {
        0
    }
    unsafe extern "C" fn launch(_: *mut c_void, _: *const FxCollDesc, _: *mut c_void) -> i32 {
        FX_OK
    }
    unsafe extern "C" fn p2p_can_run(_: *mut c_void, _: *const FxP2pDesc) -> i32 {
        0
    }
    unsafe extern "C" fn p2p_launch(_: *mut c_void, _: *const FxP2pDesc, _: *mut c_void) -> i32 {
        FX_OK
    }
    unsafe extern "C" fn bounded(_: *mut c_void) -> i32 {
        1
    }
    unsafe extern "C" fn describe(
        _: *mut c_void,
        _: *const FxCollDesc,
        _: *mut std::ffi::c_char,
        _: usize,
    ) -> usize {
        0
    }

    fn table(struct_size: usize) -> FxCollectiveV1 {
        let mut name = [0 as std::ffi::c_char; FX_NAME_BYTES];
        name[0] = b'x' as std::ffi::c_char;
        FxCollectiveV1 {
            abi_version: FX_COLL_ABI_VERSION_1,
            struct_size: struct_size as u32,
            name,
            caps: FX_COLL_CAP_CUDA_MEM,
            init: Some(init),
            finalize: Some(one),
            comm_init: Some(comm_init),
            comm_destroy: Some(one),
            can_run: Some(can_run),
            window_register: None,
            window_deregister: None,
            launch: Some(launch),
            status: None,
            last_error: None,
            p2p_can_run: Some(p2p_can_run),
            p2p_launch: Some(p2p_launch),
            launch_bounded: Some(bounded),
            describe: Some(describe),
        }
    }

    /// `t`'s first `len` bytes alone in an allocation of their own, as a
    /// plugin built with fewer fields has it.
    fn truncated(t: &FxCollectiveV1, len: usize) -> Vec<u64> {
        let mut v = vec![0u64; len.div_ceil(8)];
        // SAFETY: `len` is at most the table's size and the vector's bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (t as *const FxCollectiveV1).cast::<u8>(),
                v.as_mut_ptr().cast::<u8>(),
                len,
            )
        };
        v
    }

    fn load(t: *const FxCollectiveV1) -> Result<CollectiveLib> {
        // SAFETY: the tests' tables are readable for their `struct_size`.
        unsafe { CollectiveLib::validate(t, None, PluginSource::Builtin, "test") }
    }

    #[test]
    fn the_minimum_is_the_table_without_the_p2p_hooks() {
        assert_eq!(
            FX_COLLECTIVE_V1_MIN_SIZE,
            std::mem::offset_of!(FxCollectiveV1, p2p_can_run)
        );
        assert!(FX_COLLECTIVE_V1_MIN_SIZE < std::mem::size_of::<FxCollectiveV1>());
    }

    #[test]
    fn hooks_are_read_only_where_struct_size_reaches_them() {
        let full = std::mem::size_of::<FxCollectiveV1>();
        let lib = load(&table(full)).unwrap();
        assert!(lib.table().p2p_can_run.is_some() && lib.table().p2p_launch.is_some());
        assert!(lib.table().launch_bounded.is_some() && lib.table().describe.is_some());

        // Built with launch_bounded but before describe: it reads as absent.
        let bounded = std::mem::offset_of!(FxCollectiveV1, describe);
        let before = truncated(&table(bounded), bounded);
        let lib = load(before.as_ptr().cast()).unwrap();
        assert!(lib.table().launch_bounded.is_some() && lib.table().describe.is_none());

        // Built with the p2p hooks but before launch_bounded: it reads as absent.
        let p2p = std::mem::offset_of!(FxCollectiveV1, launch_bounded);
        let mid = truncated(&table(p2p), p2p);
        let lib = load(mid.as_ptr().cast()).unwrap();
        assert!(lib.table().p2p_can_run.is_some() && lib.table().p2p_launch.is_some());
        assert!(lib.table().launch_bounded.is_none());

        // Built before the hooks: non-null bytes past `struct_size` are never
        // read (here they are not even allocated).
        let min = FX_COLLECTIVE_V1_MIN_SIZE;
        let old = truncated(&table(min), min);
        let lib = load(old.as_ptr().cast()).unwrap();
        assert!(lib.table().p2p_can_run.is_none() && lib.table().p2p_launch.is_none());
        assert!(lib.table().launch_bounded.is_none() && lib.table().describe.is_none());
        assert!(lib.table().launch.is_some());

        // Smaller than the minimum: refused as before.
        let short = truncated(&table(min - 8), min - 8);
        assert!(load(short.as_ptr().cast()).is_err());
    }

    #[test]
    fn one_p2p_hook_without_the_other_is_refused() {
        let full = std::mem::size_of::<FxCollectiveV1>();
        let mut t = table(full);
        t.p2p_launch = None;
        let e = load(&t).err().expect("refused").to_string();
        assert!(e.contains("p2p_can_run and p2p_launch"), "{e}");
        // A struct_size that covers p2p_can_run but not p2p_launch.
        let part = FX_COLLECTIVE_V1_MIN_SIZE + 8;
        let half = truncated(&table(part), part);
        assert!(load(half.as_ptr().cast()).is_err());
    }
}
