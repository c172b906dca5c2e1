//! Generates the C table for a [`Collective`]: every hook checks its
//! pointers, runs inside `catch_unwind`, and turns errors into a code plus
//! last-error text (the transport export's `guard`).

use super::desc::{CollDesc, CommInfo, WindowDesc};
use super::oob::Oob;
use super::p2p::P2pDesc;
use super::Collective;
use crate::abi::*;
use crate::export::{finalize_ctx, guard, h_last_error, init_ctx, name_array, null};
use std::ffi::c_void;

/// The checked arguments of a `comm_init` hook (collective and devnet tables).
///
/// # Safety
/// `info` and `oob` must be null or valid as the ABI says (`info.peers` holds
/// `info.nranks` records); `comm` null or writable.
pub(crate) unsafe fn comm_init_args(
    info: *const FxCommInfo,
    oob: *const FxCommOob,
    comm: *mut *mut c_void,
) -> crate::PluginResult<(CommInfo, Oob)> {
    let info = CommInfo::from_raw(info.as_ref().ok_or_else(|| null("info"))?)?;
    let oob = Oob::from_raw(oob.as_ref().ok_or_else(|| null("oob"))?, info.nranks);
    if comm.is_null() {
        return Err(null("comm out-pointer"));
    }
    Ok((info, oob))
}

/// What the C side holds as `comm` (collective and devnet tables): the
/// plugin context `C`, the rank count, and the communicator's state `M`.
pub(crate) struct CommBox<C, M> {
    pub ctx: *const C,
    pub nranks: usize,
    pub comm: M,
}

unsafe fn ctx_ref<'a, T>(p: *mut c_void) -> crate::PluginResult<&'a T> {
    (p as *const T).as_ref().ok_or_else(|| null("ctx"))
}

/// The context and the box of a `comm` handle.
///
/// # Safety
/// `comm` must be null or a live comm boxed as `CommBox<C, M>` by its table's
/// `comm_init`.
pub(crate) unsafe fn comm_mut<'a, C, M>(
    comm: *mut c_void,
) -> crate::PluginResult<(&'a C, &'a mut CommBox<C, M>)> {
    let b = (comm as *mut CommBox<C, M>)
        .as_mut()
        .ok_or_else(|| null("comm"))?;
    let t = b.ctx.as_ref().ok_or_else(|| null("ctx"))?;
    Ok((t, b))
}

unsafe extern "C" fn h_init<T: Collective>(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32 {
    init_ctx(host, ctx, T::init)
}

unsafe extern "C" fn h_finalize<T: Collective>(ctx: *mut c_void) -> i32 {
    finalize_ctx(ctx, T::finalize)
}

unsafe extern "C" fn h_comm_init<T: Collective>(
    ctx: *mut c_void,
    info: *const FxCommInfo,
    oob: *const FxCommOob,
    comm: *mut *mut c_void,
) -> i32 {
    guard("comm_init", || {
        let t = ctx_ref::<T>(ctx)?;
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

unsafe extern "C" fn h_comm_destroy<T: Collective>(comm: *mut c_void) -> i32 {
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

unsafe extern "C" fn h_can_run<T: Collective>(comm: *mut c_void, coll: *const FxCollDesc) -> i32 {
    let mut prio = 0;
    // A priority, not a code: any failure means "cannot" (0).
    guard("can_run", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = CollDesc::<T::Window>::from_raw(coll.as_ref().ok_or_else(|| null("coll"))?)?;
        prio = t.can_run(&b.comm, &d).max(0);
        Ok(FX_OK)
    });
    prio
}

unsafe extern "C" fn h_window_register<T: Collective>(
    comm: *mut c_void,
    desc: *const FxWindowDesc,
    win: *mut *mut c_void,
) -> i32 {
    guard("window_register", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = WindowDesc::from_raw(desc.as_ref().ok_or_else(|| null("desc"))?, b.nranks)?;
        if win.is_null() {
            return Err(null("win out-pointer"));
        }
        *win = match t.window_register(&mut b.comm, &d)? {
            Some(w) => Box::into_raw(Box::new(w)) as *mut c_void,
            None => std::ptr::null_mut(),
        };
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_window_deregister<T: Collective>(
    comm: *mut c_void,
    win: *mut c_void,
) -> i32 {
    guard("window_deregister", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        if win.is_null() {
            return Err(null("win"));
        }
        t.window_deregister(&mut b.comm, *Box::from_raw(win as *mut T::Window))?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_launch<T: Collective>(
    comm: *mut c_void,
    coll: *const FxCollDesc,
    stream: *mut c_void,
) -> i32 {
    guard("launch", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = CollDesc::<T::Window>::from_raw(coll.as_ref().ok_or_else(|| null("coll"))?)?;
        t.launch(&mut b.comm, &d, stream)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_status<T: Collective>(comm: *mut c_void) -> i32 {
    guard("status", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        t.status(&b.comm)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_p2p_can_run<T: Collective>(
    comm: *mut c_void,
    desc: *const FxP2pDesc,
) -> i32 {
    let mut prio = 0;
    // A priority, not a code: any failure means "cannot" (0).
    guard("p2p_can_run", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = P2pDesc::from_raw(desc.as_ref().ok_or_else(|| null("desc"))?, b.nranks)?;
        prio = t.p2p_can_run(&b.comm, &d).max(0);
        Ok(FX_OK)
    });
    prio
}

unsafe extern "C" fn h_p2p_launch<T: Collective>(
    comm: *mut c_void,
    desc: *const FxP2pDesc,
    stream: *mut c_void,
) -> i32 {
    guard("p2p_launch", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = P2pDesc::from_raw(desc.as_ref().ok_or_else(|| null("desc"))?, b.nranks)?;
        t.p2p_launch(&mut b.comm, &d, stream)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_launch_bounded<T: Collective>(comm: *mut c_void) -> i32 {
    let mut bounded = 0;
    // A yes or no, not a code: any failure means "may wait for a host thread" (0).
    guard("launch_bounded", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        bounded = t.launch_bounded(&b.comm) as i32;
        Ok(FX_OK)
    });
    bounded
}

unsafe extern "C" fn h_describe<T: Collective>(
    comm: *mut c_void,
    coll: *const FxCollDesc,
    buf: *mut std::ffi::c_char,
    len: usize,
) -> usize {
    let mut text = String::new();
    // Words for a table, not a code: any failure means nothing to say (0).
    guard("describe", || {
        let (t, b) = comm_mut::<T, T::Comm>(comm)?;
        let d = CollDesc::<T::Window>::from_raw(coll.as_ref().ok_or_else(|| null("coll"))?)?;
        text = t.describe(&b.comm, &d).unwrap_or_default();
        Ok(FX_OK)
    });
    if !buf.is_null() && len > 0 {
        // SAFETY: the caller passes `len` writable bytes at `buf` (the ABI's contract).
        copy_str_to_c_chars(&text, std::slice::from_raw_parts_mut(buf, len));
    }
    text.len()
}

/// The v1 table for `T`. Usually reached through the macros.
pub const fn collective_table<T: Collective>() -> FxCollectiveV1 {
    FxCollectiveV1 {
        abi_version: FX_COLL_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxCollectiveV1>() as u32,
        name: name_array(T::NAME),
        caps: T::CAPS,
        init: Some(h_init::<T>),
        finalize: Some(h_finalize::<T>),
        comm_init: Some(h_comm_init::<T>),
        comm_destroy: Some(h_comm_destroy::<T>),
        can_run: Some(h_can_run::<T>),
        window_register: Some(h_window_register::<T>),
        window_deregister: Some(h_window_deregister::<T>),
        launch: Some(h_launch::<T>),
        status: Some(h_status::<T>),
        last_error: Some(h_last_error),
        p2p_can_run: Some(h_p2p_can_run::<T>),
        p2p_launch: Some(h_p2p_launch::<T>),
        launch_bounded: Some(h_launch_bounded::<T>),
        describe: Some(h_describe::<T>),
    }
}

/// A collective plugin linked into the core, collected with `inventory`.
pub struct BuiltinCollective {
    /// Returns the plugin's static table.
    pub table: fn() -> &'static FxCollectiveV1,
}

inventory::collect!(BuiltinCollective);

/// Every built-in collective plugin linked into this binary.
pub fn builtin_collectives() -> impl Iterator<Item = &'static FxCollectiveV1> {
    inventory::iter::<BuiltinCollective>
        .into_iter()
        .map(|b| (b.table)())
}

/// Register a [`Collective`] as a built-in of any binary that links this crate
/// (the binary must `use the_plugin_crate as _;`).
#[macro_export]
macro_rules! register_builtin_collective {
    ($ty:ty) => {
        $crate::inventory::submit! {
            $crate::collective::BuiltinCollective {
                table: || {
                    static TABLE: $crate::abi::FxCollectiveV1 =
                        $crate::collective::collective_table::<$ty>();
                    &TABLE
                },
            }
        }
    };
}

/// Export a [`Collective`] from a `cdylib` as the `ferrocx_collective_v1`
/// symbol (in a thin wrapper crate, as [`export_transport!`](crate::export_transport)).
#[macro_export]
macro_rules! export_collective {
    ($ty:ty) => {
        /// Collective ABI v1 entry point.
        #[no_mangle]
        pub extern "C" fn ferrocx_collective_v1() -> *const $crate::abi::FxCollectiveV1 {
            static TABLE: $crate::abi::FxCollectiveV1 =
                $crate::collective::collective_table::<$ty>();
            &TABLE
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::P2pDir;
    use crate::host::Host;
    use crate::PluginResult;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Without p2p methods: the trait's defaults.
    struct Plain;
    /// Bids for sends to rank 1; counts launched ops.
    struct Sends(AtomicUsize);

    macro_rules! base {
        () => {
            type Comm = ();
            type Window = ();
            const CAPS: u64 = FX_COLL_CAP_CUDA_MEM;
            fn init(_: Host) -> PluginResult<Self> {
                unreachable!("the tests build the comm themselves")
            }
            fn comm_init(&self, _: &CommInfo, _: Oob) -> PluginResult<()> {
                Ok(())
            }
            fn can_run(&self, _: &(), _: &CollDesc<'_, ()>) -> i32 {
                0
            }
            unsafe fn launch(
                &self,
                _: &mut (),
                _: &CollDesc<'_, ()>,
                _: *mut c_void,
            ) -> PluginResult<()> {
                Ok(())
            }
        };
    }
    impl Collective for Plain {
        const NAME: &'static str = "plain";
        base!();
    }
    impl Collective for Sends {
        const NAME: &'static str = "sends";
        base!();
        fn p2p_can_run(&self, _: &(), d: &P2pDesc) -> i32 {
            match d.ops.as_slice() {
                [op] if op.dir == P2pDir::Send && op.peer == 1 => 150,
                _ => 0,
            }
        }
        unsafe fn p2p_launch(&self, _: &mut (), d: &P2pDesc, _: *mut c_void) -> PluginResult<()> {
            self.0.fetch_add(d.ops.len(), Ordering::Relaxed);
            Ok(())
        }
        fn launch_bounded(&self, _: &()) -> bool {
            self.0.load(Ordering::Relaxed) > 0
        }
        fn describe(&self, _: &(), d: &CollDesc<'_, ()>) -> Option<String> {
            (d.count > 0).then(|| format!("{} of {}", d.coll.name(), d.count))
        }
    }

    fn desc(ops: &[FxP2pOp]) -> FxP2pDesc {
        FxP2pDesc {
            ops: ops.as_ptr(),
            nops: ops.len() as u32,
            mem_kind: FX_MEM_CUDA,
            flags: 0,
            reserved: 0,
        }
    }

    /// Run `f` with `t`'s table and a comm of 2 ranks made for it.
    fn with_comm<T: Collective<Comm = ()>>(t: &T, f: impl FnOnce(&FxCollectiveV1, *mut c_void)) {
        let mut b = CommBox::<T, T::Comm> {
            ctx: t,
            nranks: 2,
            comm: (),
        };
        f(
            &collective_table::<T>(),
            (&mut b as *mut CommBox<T, T::Comm>).cast(),
        );
    }

    #[test]
    fn p2p_hooks_bid_launch_and_default_to_unsupported() {
        let mut buf = [0u8; 8];
        let p: *mut c_void = buf.as_mut_ptr().cast();
        let send = |peer| FxP2pOp {
            kind: FX_P2P_SEND,
            peer,
            bytes: 8,
            buf: p,
        };
        let ops = [send(1), send(0)];
        with_comm(&Plain, |tab, comm| {
            let (can, launch) = (tab.p2p_can_run.unwrap(), tab.p2p_launch.unwrap());
            // SAFETY: a comm made for `Plain`; live descriptors.
            unsafe {
                assert_eq!(can(comm, &desc(&ops[..1])), 0);
                assert_eq!(
                    launch(comm, &desc(&ops), std::ptr::null_mut()),
                    FX_UNSUPPORTED
                );
            }
        });
        let s = Sends(AtomicUsize::new(0));
        with_comm(&s, |tab, comm| {
            let (can, launch) = (tab.p2p_can_run.unwrap(), tab.p2p_launch.unwrap());
            let bad = [send(2)];
            // SAFETY: a comm made for `Sends`; live descriptors (or null).
            unsafe {
                assert_eq!(can(comm, &desc(&ops[..1])), 150);
                assert_eq!(can(comm, &desc(&ops[1..])), 0);
                // A bad op or descriptor is "cannot", not a code.
                assert_eq!(can(comm, &desc(&bad)), 0);
                assert_eq!(can(comm, std::ptr::null()), 0);
                assert_eq!(launch(comm, &desc(&ops), std::ptr::null_mut()), FX_OK);
                assert_eq!(
                    launch(comm, &desc(&bad), std::ptr::null_mut()),
                    FX_INVALID_ARGUMENT
                );
            }
        });
        assert_eq!(s.0.load(Ordering::Relaxed), 2);
    }

    /// `describe` writes the trait's words (cut to the buffer, NUL-ended)
    /// and returns their full length; the default, a bad descriptor and a
    /// null comm say nothing (0, an empty string).
    #[test]
    fn describe_writes_the_trait_s_words() {
        let coll = |count| FxCollDesc {
            coll: crate::collective::Coll::AllGather.raw(),
            dtype: FX_TYPE_F32,
            count,
            mem_kind: FX_MEM_CUDA,
            ..FxCollDesc::default()
        };
        let text = |b: &[std::ffi::c_char]| {
            let n = b.iter().position(|&c| c == 0).unwrap();
            b[..n].iter().map(|&c| c as u8 as char).collect::<String>()
        };
        let mut buf = [1 as std::ffi::c_char; 32];
        with_comm(&Plain, |tab, comm| {
            let describe = tab.describe.unwrap();
            // SAFETY: a comm made for `Plain`; a live descriptor and buffer.
            unsafe { assert_eq!(describe(comm, &coll(4), buf.as_mut_ptr(), buf.len()), 0) };
            assert_eq!(text(&buf), "");
        });
        let s = Sends(AtomicUsize::new(0));
        with_comm(&s, |tab, comm| {
            let describe = tab.describe.unwrap();
            // SAFETY: a comm made for `Sends`; live descriptors and buffers (or null).
            unsafe {
                assert_eq!(describe(comm, &coll(4), buf.as_mut_ptr(), buf.len()), 15);
                assert_eq!(text(&buf), "all_gather of 4");
                let mut short = [1 as std::ffi::c_char; 6];
                assert_eq!(describe(comm, &coll(4), short.as_mut_ptr(), 6), 15);
                assert_eq!(text(&short), "all_g");
                assert_eq!(describe(comm, &coll(0), buf.as_mut_ptr(), buf.len()), 0);
                let mut bad = coll(4);
                bad.dtype = 99;
                assert_eq!(describe(comm, &bad, buf.as_mut_ptr(), buf.len()), 0);
                assert_eq!(text(&buf), "");
                assert_eq!(describe(comm, std::ptr::null(), std::ptr::null_mut(), 0), 0);
                assert_eq!(
                    describe(std::ptr::null_mut(), &coll(4), buf.as_mut_ptr(), buf.len()),
                    0
                );
            }
        });
    }

    /// `launch_bounded` answers the trait's yes or no, `false` by default
    /// and on a null comm (a failure is "may wait for a host thread").
    #[test]
    fn launch_bounded_says_the_trait_s_answer() {
        with_comm(&Plain, |tab, comm| {
            let bounded = tab.launch_bounded.unwrap();
            // SAFETY: a comm made for `Plain`, then null.
            unsafe {
                assert_eq!(bounded(comm), 0);
                assert_eq!(bounded(std::ptr::null_mut()), 0);
            }
        });
        let s = Sends(AtomicUsize::new(0));
        with_comm(&s, |tab, comm| {
            let bounded = tab.launch_bounded.unwrap();
            // SAFETY: a comm made for `Sends`.
            unsafe { assert_eq!(bounded(comm), 0) };
            s.0.store(1, Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { assert_eq!(bounded(comm), 1) };
        });
    }
}
