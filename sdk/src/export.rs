//! Generates the C table for a [`Transport`]: every hook checks its pointers,
//! runs inside `catch_unwind`, and turns errors into a code plus last-error text.

use crate::abi::*;
use crate::blob::Blob;
use crate::error::{set_last_error, PluginError, PluginResult};
use crate::host::Host;
use crate::transport::{ConnReq, ConnectState, MemKind, Transport};
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What the C side holds as `conn`.
struct ConnBox<T: Transport> {
    ctx: *const T,
    conn: Option<T::Conn>,
    /// Requests handed out and not yet reported done: freed with the connection.
    outstanding: Vec<*mut ReqBox<T>>,
    /// Boxes of finished requests (`req` empty), handed out again by the next
    /// posts: a request costs no allocation once the connection is warm.
    spare: Vec<*mut ReqBox<T>>,
}

/// Spare request boxes a connection keeps (more in flight at once are
/// allocated and freed as before).
const SPARE_BOXES: usize = 64;

/// What the C side holds as `request`.
struct ReqBox<T: Transport> {
    ctx: *const T,
    conn: *mut ConnBox<T>,
    /// `None` only while the box is spare.
    req: Option<T::Request>,
}

pub(crate) fn guard(hook: &str, f: impl FnOnce() -> PluginResult<i32>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            set_last_error(&format!("{hook}: {}", e.message()));
            e.code()
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("{hook}: plugin panicked: {what}"));
            FX_INTERNAL
        }
    }
}

pub(crate) fn null(what: &str) -> PluginError {
    PluginError::invalid(format!("{what} is null"))
}

/// # Safety
/// `p` must be null or a pointer made by this module for `T`.
unsafe fn ctx_ref<'a, T>(p: *mut c_void) -> PluginResult<&'a T> {
    (p as *const T).as_ref().ok_or_else(|| null("ctx"))
}

/// The `init` hook of every table kind: `make` builds the context from the
/// host table, boxed into `*ctx`.
///
/// # Safety
/// `host` must be null or a host table that outlives the context; `ctx` null
/// or writable.
pub(crate) unsafe fn init_ctx<T>(
    host: *const FxHostV1,
    ctx: *mut *mut c_void,
    make: impl FnOnce(Host) -> PluginResult<T>,
) -> i32 {
    guard("init", || {
        if ctx.is_null() {
            return Err(null("ctx out-pointer"));
        }
        let t = make(Host::from_raw(host))?;
        *ctx = Box::into_raw(Box::new(t)) as *mut c_void;
        Ok(FX_OK)
    })
}

/// The `finalize` hook of every table kind: the context `init_ctx` made,
/// handed to `fin` by value.
///
/// # Safety
/// `ctx` must be null or a context made by [`init_ctx`] for `T`, finalized once.
pub(crate) unsafe fn finalize_ctx<T>(
    ctx: *mut c_void,
    fin: impl FnOnce(T) -> PluginResult<()>,
) -> i32 {
    guard("finalize", || {
        if ctx.is_null() {
            return Err(null("ctx"));
        }
        fin(*Box::from_raw(ctx as *mut T))?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_init<T: Transport>(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32 {
    init_ctx(host, ctx, T::init)
}

unsafe extern "C" fn h_finalize<T: Transport>(ctx: *mut c_void) -> i32 {
    finalize_ctx(ctx, T::finalize)
}

unsafe extern "C" fn h_can_connect<T: Transport>(
    ctx: *mut c_void,
    me: *const FxPeerInfo,
    peer: *const FxPeerInfo,
) -> i32 {
    let mut score = 0;
    // can_connect answers a score, not a code: any failure means "cannot" (0).
    guard("can_connect", || {
        let t = ctx_ref::<T>(ctx)?;
        let (me, peer) = (
            me.as_ref().ok_or_else(|| null("me"))?,
            peer.as_ref().ok_or_else(|| null("peer"))?,
        );
        score = t.can_connect(me, peer).max(0);
        Ok(FX_OK)
    });
    score
}

unsafe extern "C" fn h_setup<T: Transport>(
    ctx: *mut c_void,
    req: *const FxConnReq,
    conn: *mut *mut c_void,
    out: *mut FxBlob,
) -> i32 {
    guard("setup", || {
        let t = ctx_ref::<T>(ctx)?;
        let req = req.as_ref().ok_or_else(|| null("req"))?;
        if conn.is_null() || out.is_null() {
            return Err(null("conn or blob out-pointer"));
        }
        let mut blob = Blob::new();
        let c = t.setup(&ConnReq::from_raw(req), &mut blob)?;
        *out = blob;
        let b = Box::new(ConnBox::<T> {
            ctx: t,
            conn: Some(c),
            outstanding: Vec::new(),
            spare: Vec::new(),
        });
        *conn = Box::into_raw(b) as *mut c_void;
        Ok(FX_OK)
    })
}

/// # Safety
/// `conn` must be null or a connection made by `h_setup::<T>` and not yet freed.
unsafe fn conn_mut<'a, T: Transport>(
    conn: *mut c_void,
) -> PluginResult<(&'a T, &'a mut ConnBox<T>)> {
    let b = (conn as *mut ConnBox<T>)
        .as_mut()
        .ok_or_else(|| null("conn"))?;
    let t = b.ctx.as_ref().ok_or_else(|| null("ctx"))?;
    Ok((t, b))
}

unsafe extern "C" fn h_connect<T: Transport>(conn: *mut c_void, peer: *const FxBlob) -> i32 {
    guard("connect", || {
        let (t, b) = conn_mut::<T>(conn)?;
        let peer = peer.as_ref().ok_or_else(|| null("peer blob"))?;
        let c = b
            .conn
            .as_mut()
            .ok_or_else(|| PluginError::invalid("connection already freed"))?;
        Ok(match t.connect(c, peer)? {
            ConnectState::Done => FX_OK,
            ConnectState::InProgress => FX_IN_PROGRESS,
        })
    })
}

unsafe extern "C" fn h_proxy_setup<T: Transport>(conn: *mut c_void) -> i32 {
    guard("proxy_setup", || {
        let (t, b) = conn_mut::<T>(conn)?;
        t.proxy_setup(b.conn.as_mut().ok_or_else(|| null("conn"))?)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_proxy_connect<T: Transport>(conn: *mut c_void) -> i32 {
    guard("proxy_connect", || {
        let (t, b) = conn_mut::<T>(conn)?;
        t.proxy_connect(b.conn.as_mut().ok_or_else(|| null("conn"))?)?;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_proxy_progress<T: Transport>(conn: *mut c_void, did_work: *mut i32) -> i32 {
    guard("proxy_progress", || {
        let (t, b) = conn_mut::<T>(conn)?;
        let worked = t.proxy_progress(b.conn.as_mut().ok_or_else(|| null("conn"))?)?;
        if !did_work.is_null() {
            *did_work = worked as i32;
        }
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_register<T: Transport>(
    ctx: *mut c_void,
    ptr: *mut c_void,
    len: usize,
    kind: i32,
    mhandle: *mut *mut c_void,
    out: *mut FxBlob,
) -> i32 {
    guard("register", || {
        let t = ctx_ref::<T>(ctx)?;
        if ptr.is_null() {
            return Err(null("buffer"));
        }
        if mhandle.is_null() {
            return Err(null("mhandle out-pointer"));
        }
        let mut blob = Blob::new();
        let h = t.register(ptr as *mut u8, len, MemKind::from_raw(kind)?, &mut blob)?;
        if !out.is_null() {
            *out = blob;
        }
        *mhandle = Box::into_raw(Box::new(h)) as *mut c_void;
        Ok(FX_OK)
    })
}

unsafe extern "C" fn h_deregister<T: Transport>(ctx: *mut c_void, mhandle: *mut c_void) -> i32 {
    guard("deregister", || {
        let t = ctx_ref::<T>(ctx)?;
        if mhandle.is_null() {
            return Err(null("mhandle"));
        }
        t.deregister(*Box::from_raw(mhandle as *mut T::MemHandle))?;
        Ok(FX_OK)
    })
}

/// # Safety
/// `conn` must be null or a live connection made by `h_setup::<T>`; `request`
/// must be null or writable.
unsafe fn post<T: Transport>(
    conn: *mut c_void,
    request: *mut *mut c_void,
    f: impl FnOnce(&T, &mut T::Conn) -> PluginResult<Option<T::Request>>,
) -> PluginResult<i32> {
    let (t, b) = conn_mut::<T>(conn)?;
    if request.is_null() {
        return Err(null("request out-pointer"));
    }
    *request = std::ptr::null_mut();
    let c = b
        .conn
        .as_mut()
        .ok_or_else(|| PluginError::invalid("connection already freed"))?;
    if let Some(req) = f(t, c)? {
        let rb = match b.spare.pop() {
            Some(rb) => {
                // A spare box of this connection, its request dropped at retirement.
                (*rb).req = Some(req);
                rb
            }
            None => Box::into_raw(Box::new(ReqBox::<T> {
                ctx: t,
                conn: b,
                req: Some(req),
            })),
        };
        b.outstanding.push(rb);
        *request = rb as *mut c_void;
    }
    Ok(FX_OK)
}

unsafe extern "C" fn h_isend<T: Transport>(
    conn: *mut c_void,
    data: *const c_void,
    len: usize,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> i32 {
    guard("isend", || {
        if data.is_null() && len > 0 {
            return Err(null("send buffer"));
        }
        let mh = (mhandle as *const T::MemHandle).as_ref();
        post::<T>(conn, request, |t, c| t.isend(c, data as *const u8, len, mh))
    })
}

unsafe extern "C" fn h_irecv<T: Transport>(
    conn: *mut c_void,
    data: *mut c_void,
    len: usize,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> i32 {
    guard("irecv", || {
        if data.is_null() && len > 0 {
            return Err(null("receive buffer"));
        }
        let mh = (mhandle as *const T::MemHandle).as_ref();
        post::<T>(conn, request, |t, c| t.irecv(c, data as *mut u8, len, mh))
    })
}

/// Forget a finished request: unlink it from its connection, drop it, and
/// keep its box as a spare (or free it when the connection has enough).
///
/// # Safety
/// `rb` must be a live request made by `post::<T>`; the C side's handle is
/// dead after this.
unsafe fn retire<T: Transport>(rb: *mut ReqBox<T>) {
    (*rb).req = None;
    if let Some(cb) = (*rb).conn.as_mut() {
        if let Some(i) = cb.outstanding.iter().position(|&p| p == rb) {
            cb.outstanding.swap_remove(i);
        }
        if cb.spare.len() < SPARE_BOXES {
            cb.spare.push(rb);
            return;
        }
    }
    drop(Box::from_raw(rb));
}

unsafe extern "C" fn h_test<T: Transport>(
    request: *mut c_void,
    done: *mut i32,
    nbytes: *mut usize,
) -> i32 {
    let rb = request as *mut ReqBox<T>;
    let mut finished = false;
    let code = guard("test", || {
        let r = rb.as_mut().ok_or_else(|| null("request"))?;
        if done.is_null() {
            return Err(null("done out-pointer"));
        }
        let t = r.ctx.as_ref().ok_or_else(|| null("ctx"))?;
        let req = r
            .req
            .as_mut()
            .ok_or_else(|| PluginError::invalid("request already finished"))?;
        let res = t.test(req);
        finished = !matches!(res, Ok(None));
        match res? {
            Some(n) => {
                *done = 1;
                if !nbytes.is_null() {
                    *nbytes = n;
                }
            }
            None => *done = 0,
        }
        Ok(FX_OK)
    });
    if finished && !rb.is_null() {
        retire::<T>(rb);
    }
    code
}

unsafe extern "C" fn h_free<T: Transport>(conn: *mut c_void) -> i32 {
    guard("free", || {
        if conn.is_null() {
            return Err(null("conn"));
        }
        let mut b = Box::from_raw(conn as *mut ConnBox<T>);
        for rb in b.outstanding.drain(..).chain(b.spare.drain(..)) {
            drop(Box::from_raw(rb));
        }
        let t = b.ctx.as_ref().ok_or_else(|| null("ctx"))?;
        if let Some(c) = b.conn.take() {
            t.free(c)?;
        }
        Ok(FX_OK)
    })
}

pub(crate) unsafe extern "C" fn h_last_error(buf: *mut c_char, len: usize) -> usize {
    let msg = crate::error::last_error();
    if !buf.is_null() && len > 0 {
        let out = std::slice::from_raw_parts_mut(buf, len);
        copy_str_to_c_chars(&msg, out);
    }
    msg.len()
}

pub(crate) const fn name_array(name: &str) -> [c_char; FX_NAME_BYTES] {
    let bytes = name.as_bytes();
    assert!(
        bytes.len() < FX_NAME_BYTES,
        "plugin name must be shorter than 32 bytes"
    );
    let mut out = [0 as c_char; FX_NAME_BYTES];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i] as c_char;
        i += 1;
    }
    out
}

/// The v1 table for `T`. Usually reached through the macros.
pub const fn transport_table<T: Transport>() -> FxTransportV1 {
    FxTransportV1 {
        abi_version: FX_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxTransportV1>() as u32,
        name: name_array(T::NAME),
        caps: T::CAPS,
        init: Some(h_init::<T>),
        finalize: Some(h_finalize::<T>),
        can_connect: Some(h_can_connect::<T>),
        setup: Some(h_setup::<T>),
        connect: Some(h_connect::<T>),
        proxy_setup: Some(h_proxy_setup::<T>),
        proxy_connect: Some(h_proxy_connect::<T>),
        proxy_progress: if T::NEEDS_PROXY_PROGRESS {
            Some(h_proxy_progress::<T>)
        } else {
            None
        },
        reg: Some(h_register::<T>),
        deregister: Some(h_deregister::<T>),
        isend: Some(h_isend::<T>),
        irecv: Some(h_irecv::<T>),
        test: Some(h_test::<T>),
        free: Some(h_free::<T>),
        last_error: Some(h_last_error),
    }
}

/// A plugin linked into the core, collected with `inventory`.
pub struct BuiltinTransport {
    /// Returns the plugin's static table.
    pub table: fn() -> &'static FxTransportV1,
}

inventory::collect!(BuiltinTransport);

/// Every built-in transport linked into this binary.
pub fn builtin_transports() -> impl Iterator<Item = &'static FxTransportV1> {
    inventory::iter::<BuiltinTransport>
        .into_iter()
        .map(|b| (b.table)())
}

/// Register a [`Transport`] as a built-in of any binary that links this crate
/// (the binary must `use the_plugin_crate as _;` or the linker drops it).
#[macro_export]
macro_rules! register_builtin {
    ($ty:ty) => {
        $crate::inventory::submit! {
            $crate::BuiltinTransport {
                table: || {
                    static TABLE: $crate::abi::FxTransportV1 = $crate::transport_table::<$ty>();
                    &TABLE
                },
            }
        }
    };
}

/// Export a [`Transport`] from a `cdylib` as the `ferrocx_transport_v1` symbol.
/// Use it in exactly one crate per `.so` (a thin wrapper crate), never in a
/// library that is also linked as a built-in, or two symbols clash.
#[macro_export]
macro_rules! export_transport {
    ($ty:ty) => {
        /// ABI v1 entry point.
        #[no_mangle]
        pub extern "C" fn ferrocx_transport_v1() -> *const $crate::abi::FxTransportV1 {
            static TABLE: $crate::abi::FxTransportV1 = $crate::transport_table::<$ty>();
            &TABLE
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Requests of [`Mock`] dropped so far.
    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    /// Done at its second test.
    struct Req {
        tested: bool,
        len: usize,
    }

    impl Drop for Req {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Mock;

    impl Transport for Mock {
        type Conn = ();
        type Request = Req;
        type MemHandle = ();
        const NAME: &'static str = "mock";
        const CAPS: u64 = 0;
        fn init(_: Host) -> PluginResult<Self> {
            Ok(Mock)
        }
        fn can_connect(&self, _: &FxPeerInfo, _: &FxPeerInfo) -> i32 {
            1
        }
        fn setup(&self, _: &ConnReq, _: &mut Blob) -> PluginResult<()> {
            Ok(())
        }
        fn connect(&self, _: &mut (), _: &Blob) -> PluginResult<ConnectState> {
            Ok(ConnectState::Done)
        }
        unsafe fn isend(
            &self,
            _: &mut (),
            _: *const u8,
            len: usize,
            _: Option<&()>,
        ) -> PluginResult<Option<Req>> {
            Ok(Some(Req { tested: false, len }))
        }
        unsafe fn irecv(
            &self,
            _: &mut (),
            _: *mut u8,
            len: usize,
            _: Option<&()>,
        ) -> PluginResult<Option<Req>> {
            Ok(Some(Req { tested: false, len }))
        }
        fn test(&self, r: &mut Req) -> PluginResult<Option<usize>> {
            Ok(std::mem::replace(&mut r.tested, true).then_some(r.len))
        }
        fn free(&self, _: ()) -> PluginResult<()> {
            Ok(())
        }
    }

    /// Post a send of `len` bytes (at most 16; `Mock` only reports `len` back).
    fn send(conn: *mut c_void, len: usize) -> *mut c_void {
        static DATA: [u8; 16] = [0; 16];
        assert!(len <= DATA.len());
        let mut req = std::ptr::null_mut();
        // SAFETY: a live connection of `Mock`; `len` readable bytes; a valid out-pointer.
        let code = unsafe {
            h_isend::<Mock>(
                conn,
                DATA.as_ptr().cast(),
                len,
                std::ptr::null_mut(),
                &mut req,
            )
        };
        assert_eq!(code, FX_OK);
        assert!(!req.is_null());
        req
    }

    /// Test `req` once: its `(done, nbytes)`.
    fn test(req: *mut c_void) -> (i32, usize) {
        let (mut done, mut n) = (-1, 0);
        // SAFETY: a live request of `Mock`; valid out-pointers.
        assert_eq!(unsafe { h_test::<Mock>(req, &mut done, &mut n) }, FX_OK);
        (done, n)
    }

    /// A finished request is dropped at once and its box handed out again by
    /// the next post; freeing the connection drops what is still outstanding.
    #[test]
    fn request_boxes_are_reused_and_requests_dropped_when_done() {
        let ctx = Box::into_raw(Box::new(Mock));
        let conn = Box::into_raw(Box::new(ConnBox::<Mock> {
            ctx,
            conn: Some(()),
            outstanding: Vec::new(),
            spare: Vec::new(),
        }))
        .cast::<c_void>();
        let first: Vec<_> = (1..=3).map(|len| send(conn, len)).collect();
        for (i, &r) in first.iter().enumerate() {
            assert_eq!(test(r), (0, 0));
            assert_eq!(test(r), (1, i + 1));
        }
        assert_eq!(DROPPED.load(Ordering::SeqCst), 3, "dropped when done");
        let spare = |conn: *mut c_void| {
            // SAFETY: the live connection made above, not in use by a hook now.
            unsafe { (*conn.cast::<ConnBox<Mock>>()).spare.len() }
        };
        assert_eq!(spare(conn), 3, "the finished requests' boxes are kept");
        let again: Vec<_> = (10..13).map(|len| send(conn, len)).collect();
        assert_eq!(spare(conn), 0, "and taken by the next posts");
        let mut a = first.clone();
        let mut b = again.clone();
        a.sort();
        b.sort();
        assert_eq!(a, b, "the finished requests' boxes are handed out again");
        // Their requests are the new ones.
        assert_eq!(test(again[0]), (0, 0));
        assert_eq!(test(again[0]), (1, 10));
        // SAFETY: the connection made above, freed once.
        assert_eq!(unsafe { h_free::<Mock>(conn) }, FX_OK);
        assert_eq!(
            DROPPED.load(Ordering::SeqCst),
            6,
            "the two outstanding dropped with the connection"
        );
        // SAFETY: made above; no connection uses it any more.
        drop(unsafe { Box::from_raw(ctx) });
    }
}
