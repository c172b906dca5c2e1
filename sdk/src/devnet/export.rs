//! Generates the C table for a [`DevNet`]: every hook checks its pointers,
//! runs inside `catch_unwind`, and turns errors into a code plus last-error
//! text (the transport export's `guard`).

use super::DevNet;
use crate::abi::*;
use crate::collective::export::{comm_init_args, comm_mut, CommBox};
use crate::collective::WindowDesc;
use crate::export::{finalize_ctx, guard, h_last_error, init_ctx, name_array, null};
use std::ffi::{c_char, c_void};

unsafe extern "C" fn h_init<T: DevNet>(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32 {
    init_ctx(host, ctx, T::init)
}

unsafe extern "C" fn h_finalize<T: DevNet>(ctx: *mut c_void) -> i32 {
    finalize_ctx(ctx, T::finalize)
}

unsafe extern "C" fn h_comm_init<T: DevNet>(
    ctx: *mut c_void,
    info: *const FxCommInfo,
    oob: *const FxCommOob,
    comm: *mut *mut c_void,
) -> i32 {
    guard("comm_init", || {
        let t = (ctx as *const T).as_ref().ok_or_else(|| null("ctx"))?;
        let (info, oob) = comm_init_args(info, oob, comm)?;
        let c = t.comm_init(&info, oob)?;
        *comm = Box::into_raw(Box::new(CommBox::<T, T::Comm> {
            ctx: t,
            nranks: info.nranks,
            comm: c,
        })) as *mut c_void;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_comm_destroy<T: DevNet>(comm: *mut c_void) -> i32 {
    guard("comm_destroy", || {
        if comm.is_null() {
            return Err(null("comm"));
        }
        let b = Box::from_raw(comm as *mut CommBox<T, T::Comm>);
        let t = b.ctx.as_ref().ok_or_else(|| null("ctx"))?;
        t.comm_destroy(b.comm)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_window_register<T: DevNet>(
    comm: *mut c_void,
    desc: *const FxWindowDesc,
    id: *mut u32,
) -> i32 {
    guard("window_register", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = WindowDesc::from_raw(desc.as_ref().ok_or_else(|| null("desc"))?, b.nranks)?;
        let id = id.as_mut().ok_or_else(|| null("id out-pointer"))?;
        *id = t.window_register(&mut b.comm, &d)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_window_deregister<T: DevNet>(comm: *mut c_void, id: u32) -> i32 {
    guard("window_deregister", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        t.window_deregister(&mut b.comm, id)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_device_view<T: DevNet>(comm: *mut c_void, view: *mut u64) -> i32 {
    guard("device_view", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let view = view.as_mut().ok_or_else(|| null("view out-pointer"))?;
        *view = t.device_view(&b.comm)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_status<T: DevNet>(comm: *mut c_void) -> i32 {
    guard("status", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        t.status(&b.comm)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_stats<T: DevNet>(comm: *mut c_void, stats: *mut FxDevnetStats) -> i32 {
    guard("stats", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let out = stats.as_mut().ok_or_else(|| null("stats out-pointer"))?;
        *out = t.stats(&b.comm);
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_describe<T: DevNet>(
    comm: *mut c_void,
    buf: *mut c_char,
    len: usize,
) -> usize {
    let mut text = String::new();
    guard("describe", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        text = t.describe(&b.comm);
        Ok(FX_OK)
    });
    if !buf.is_null() && len > 0 {
        copy_str_to_c_chars(&text, std::slice::from_raw_parts_mut(buf, len));
    }
    text.len()
}

/// The v1 table for `T`. Usually reached through the macros.
pub const fn devnet_table<T: DevNet>() -> FxDevnetV1 {
    FxDevnetV1 {
        abi_version: FX_DEVNET_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxDevnetV1>() as u32,
        name: name_array(T::NAME),
        caps: T::CAPS,
        init: Some(h_init::<T>),
        finalize: Some(h_finalize::<T>),
        comm_init: Some(h_comm_init::<T>),
        comm_destroy: Some(h_comm_destroy::<T>),
        window_register: Some(h_window_register::<T>),
        window_deregister: Some(h_window_deregister::<T>),
        device_view: Some(h_device_view::<T>),
        status: Some(h_status::<T>),
        stats: Some(h_stats::<T>),
        describe: Some(h_describe::<T>),
        last_error: Some(h_last_error),
    }
}

/// A device-networking plugin linked into the core, collected with `inventory`.
pub struct BuiltinDevnet {
    /// Returns the plugin's static table.
    pub table: fn() -> &'static FxDevnetV1,
}

inventory::collect!(BuiltinDevnet);

/// Every built-in device-networking plugin linked into this binary.
pub fn builtin_devnets() -> impl Iterator<Item = &'static FxDevnetV1> {
    inventory::iter::<BuiltinDevnet>
        .into_iter()
        .map(|b| (b.table)())
}

/// Register a [`DevNet`] as a built-in of any binary that links this crate
/// (the binary must `use the_plugin_crate as _;`).
#[macro_export]
macro_rules! register_builtin_devnet {
    ($ty:ty) => {
        $crate::inventory::submit! {
            $crate::devnet::BuiltinDevnet {
                table: || {
                    static TABLE: $crate::abi::FxDevnetV1 = $crate::devnet::devnet_table::<$ty>();
                    &TABLE
                },
            }
        }
    };
}

/// Export a [`DevNet`] from a `cdylib` as the `ferrocx_devnet_v1` symbol (in
/// a thin wrapper crate, as [`export_transport!`](crate::export_transport)).
#[macro_export]
macro_rules! export_devnet {
    ($ty:ty) => {
        /// Device-networking ABI v1 entry point.
        #[no_mangle]
        pub extern "C" fn ferrocx_devnet_v1() -> *const $crate::abi::FxDevnetV1 {
            static TABLE: $crate::abi::FxDevnetV1 = $crate::devnet::devnet_table::<$ty>();
            &TABLE
        }
    };
}
