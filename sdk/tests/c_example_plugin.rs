//! The C example plugin (`examples/c-pipe/fx_example_pipe.c`) really works:
//! it is compiled with `cc`, loaded with `dlopen`, and moves bytes between two
//! processes (this test binary re-executes itself as the receiver).
//!
//! Also: misuse returns error codes (not crashes) with last-error text, a
//! receive smaller than the message fails cleanly, a closed peer is
//! `FX_REMOTE`, and a library without `ferrocx_transport_v1` has no entry point.

mod common;

use ferrocx_sdk::abi::*;
use ferrocx_sdk::DetachedHost;
use libloading::Library;
use std::ffi::{c_char, c_void, CStr};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::sync::atomic::AtomicU32;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// Set in the re-executed child: which role it plays.
const ROLE_ENV: &str = "FERROCX_CPIPE_TEST_ROLE";
/// Path of the compiled plugin, handed to the child.
const SO_ENV: &str = "FERROCX_CPIPE_TEST_SO";
/// Connection id both processes use.
const CONN_ENV: &str = "FERROCX_CPIPE_TEST_CONN";
/// Fake host identity shared by both ends (same host).
const HOST_HASH: u64 = 0x00c0_ffee_1234_5678;
/// Bound on every wait in these tests.
const DEADLINE: Duration = Duration::from_secs(60);

/// Message sizes of the main exchange: empty, tiny, odd, a page, large and odd.
const SIZES: [usize; 5] = [0, 1, 7, 4096, (1 << 20) + 3];
/// Small messages posted all at once (many requests in flight).
const IN_FLIGHT: usize = 40;
/// The message sent to a receive that is too small, and that receive's size.
const OVERSIZE: (usize, usize) = (100, 10);
/// The message after it (proves the stream stayed in step).
const AFTER_OVERSIZE: usize = 5;

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c-pipe/fx_example_pipe.c")
}

/// Compile the example into `dir` with the command documented in its README.
fn build_plugin(cc: &common::CCompiler, dir: &Path) -> PathBuf {
    let so = dir.join("libferrocx_plugin_cpipe.so");
    let include = format!("-I{}", common::include_dir().display());
    cc.run(&[
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        &include,
        "-o",
        so.to_str().unwrap(),
        source().to_str().unwrap(),
    ]);
    so
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 131 + seed * 17 + len) % 251) as u8)
        .collect()
}

fn in_flight_size(i: usize) -> usize {
    (i * 37) % 300
}

/// The loaded library and its table.
struct Plugin {
    table: *const FxTransportV1,
    _lib: Library,
}

impl Plugin {
    fn load(path: &Path) -> Plugin {
        // SAFETY: loading the example runs no initializers beyond libc's.
        let lib = unsafe { Library::new(path) }
            .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
        // SAFETY: the symbol is `const fx_transport_v1_t *(*)(void)` per the ABI.
        let table = unsafe {
            let entry = lib
                .get::<FxTransportV1Entry>(FX_SYMBOL_V1.as_bytes())
                .expect("ferrocx_transport_v1 symbol");
            entry()
        };
        assert!(!table.is_null(), "ferrocx_transport_v1 returned NULL");
        Plugin { table, _lib: lib }
    }

    fn t(&self) -> &FxTransportV1 {
        // SAFETY: non-null, static data of the library kept loaded by `_lib`.
        unsafe { &*self.table }
    }

    fn last_error(&self) -> String {
        let f = self.t().last_error.expect("last_error hook");
        let mut buf = [0 as c_char; 512];
        // SAFETY: valid buffer of buf.len() bytes.
        let n = unsafe { f(buf.as_mut_ptr(), buf.len()) };
        let text = c_chars_to_string(&buf);
        assert!(
            n >= text.len(),
            "last_error returned {n}, shorter than its text '{text}'"
        );
        text
    }

    /// `init` with a detached host; the host must outlive the context.
    fn init(&self, host: &DetachedHost) -> *mut c_void {
        self.init_raw(host.as_ptr())
    }

    fn init_raw(&self, host: *const FxHostV1) -> *mut c_void {
        let mut ctx = null_mut();
        // SAFETY: valid host table and out-pointer.
        let rc = unsafe { self.t().init.unwrap()(host, &mut ctx) };
        assert_eq!(rc, FX_OK, "init: {}", self.last_error());
        assert!(!ctx.is_null());
        ctx
    }

    fn finalize(&self, ctx: *mut c_void) {
        // SAFETY: a context from init, with no connection left.
        let rc = unsafe { self.t().finalize.unwrap()(ctx) };
        assert_eq!(rc, FX_OK, "finalize: {}", self.last_error());
    }

    fn setup(&self, ctx: *mut c_void, req: &FxConnReq) -> (*mut c_void, FxBlob) {
        let mut conn = null_mut();
        let mut blob = FxBlob::new();
        // SAFETY: valid context and pointers.
        let rc = unsafe { self.t().setup.unwrap()(ctx, req, &mut conn, &mut blob) };
        assert_eq!(rc, FX_OK, "setup: {}", self.last_error());
        assert!(!conn.is_null());
        assert!(
            blob.len > 0 && blob.len as usize <= FX_BLOB_BYTES,
            "blob len {}",
            blob.len
        );
        (conn, blob)
    }

    /// Call `connect` until it is done; `other` (if any) is driven in the same loop.
    fn connect_all(&self, ends: &[(*mut c_void, &FxBlob)]) {
        let start = Instant::now();
        let mut done = vec![false; ends.len()];
        while done.iter().any(|d| !d) {
            for (i, (conn, blob)) in ends.iter().enumerate() {
                if done[i] {
                    continue;
                }
                // SAFETY: a live connection and a blob from the peer's setup.
                match unsafe { self.t().connect.unwrap()(*conn, *blob) } {
                    FX_OK => done[i] = true,
                    FX_IN_PROGRESS => {}
                    rc => panic!("connect returned {}: {}", code_name(rc), self.last_error()),
                }
            }
            assert!(
                start.elapsed() < DEADLINE,
                "connect did not finish in {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Post a send; the request must be accepted now (the example takes up to 1024).
    fn isend(&self, conn: *mut c_void, data: &[u8]) -> *mut c_void {
        let mut req = null_mut();
        // SAFETY: `data` outlives the request (callers keep their buffers until done).
        let rc = unsafe {
            self.t().isend.unwrap()(
                conn,
                data.as_ptr() as *const c_void,
                data.len(),
                null_mut(),
                &mut req,
            )
        };
        assert_eq!(rc, FX_OK, "isend: {}", self.last_error());
        assert!(
            !req.is_null(),
            "isend said 'not now' with few requests in flight"
        );
        req
    }

    fn irecv(&self, conn: *mut c_void, buf: &mut [u8]) -> *mut c_void {
        let mut req = null_mut();
        // SAFETY: `buf` outlives the request.
        let rc = unsafe {
            self.t().irecv.unwrap()(
                conn,
                buf.as_mut_ptr() as *mut c_void,
                buf.len(),
                null_mut(),
                &mut req,
            )
        };
        assert_eq!(rc, FX_OK, "irecv: {}", self.last_error());
        assert!(
            !req.is_null(),
            "irecv said 'not now' with few requests in flight"
        );
        req
    }

    /// Test `req` until done: `Ok(nbytes)`, or the error code and last-error text.
    fn wait(&self, req: *mut c_void) -> Result<usize, (i32, String)> {
        let start = Instant::now();
        loop {
            let (mut done, mut nbytes) = (0i32, usize::MAX);
            // SAFETY: a live request; it is gone after done or an error, and we stop then.
            let rc = unsafe { self.t().test.unwrap()(req, &mut done, &mut nbytes) };
            if rc != FX_OK {
                return Err((rc, self.last_error()));
            }
            if done != 0 {
                return Ok(nbytes);
            }
            assert!(
                start.elapsed() < DEADLINE,
                "request not done in {DEADLINE:?}"
            );
            std::thread::yield_now();
        }
    }

    fn free(&self, conn: *mut c_void) {
        // SAFETY: a live connection.
        let rc = unsafe { self.t().free.unwrap()(conn) };
        assert_eq!(rc, FX_OK, "free: {}", self.last_error());
    }
}

fn peer(rank: i32, pid: u32) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.local_rank = rank;
    p.pid = pid as i32;
    p.host_hash = HOST_HASH;
    p.comm_hash = 0xc0ff;
    p.set_host_name("localhost");
    p
}

fn conn_req(direction: i32, conn_id: u64) -> FxConnReq {
    let (me, other) = if direction == FX_DIR_SEND {
        (0, 1)
    } else {
        (1, 0)
    };
    FxConnReq {
        me: peer(me, std::process::id()),
        peer: peer(other, 0),
        direction,
        channel: 0,
        conn_id,
    }
}

fn blob_to_hex(b: &FxBlob) -> String {
    b.as_bytes().iter().map(|x| format!("{x:02x}")).collect()
}

fn blob_from_hex(s: &str) -> FxBlob {
    let bytes: Vec<u8> = (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex blob"))
        .collect();
    let mut b = FxBlob::new();
    b.set_bytes(&bytes).expect("blob fits");
    b
}

/// Compiler or skip: returns None (after printing the notice) when there is none.
fn compiler(test: &str) -> Option<common::CCompiler> {
    let cc = common::CCompiler::find();
    if cc.is_none() {
        common::skip_no_compiler(test);
    }
    cc
}

// ---------------------------------------------------------------------------

static LOGGED: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn capture_log(_ctx: *mut c_void, level: i32, msg: *const c_char) {
    // SAFETY: the ABI promises a NUL-terminated message.
    let text = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    LOGGED.lock().unwrap().push((level, text));
}

#[test]
fn table_is_a_valid_v1_transport() {
    let Some(cc) = compiler("table_is_a_valid_v1_transport") else {
        return;
    };
    let dir = common::TempDir::new("cpipe-table");
    let p = Plugin::load(&build_plugin(&cc, dir.path()));
    let t = p.t();
    assert_eq!(t.abi_version, FX_ABI_VERSION_1);
    assert_eq!(t.struct_size as usize, std::mem::size_of::<FxTransportV1>());
    assert_eq!(t.name_str(), "c-pipe");
    assert_eq!(t.caps, FX_CAP_HOST_MEM);
    for (hook, present) in [
        ("init", t.init.is_some()),
        ("finalize", t.finalize.is_some()),
        ("can_connect", t.can_connect.is_some()),
        ("setup", t.setup.is_some()),
        ("connect", t.connect.is_some()),
        ("isend", t.isend.is_some()),
        ("irecv", t.irecv.is_some()),
        ("test", t.test.is_some()),
        ("free", t.free.is_some()),
        ("last_error", t.last_error.is_some()),
    ] {
        assert!(present, "required hook {hook} is NULL");
    }
    // Documented choice: no registration and no proxy work, so those hooks are absent.
    assert!(t.reg.is_none() && t.deregister.is_none());
    assert!(t.proxy_setup.is_none() && t.proxy_connect.is_none() && t.proxy_progress.is_none());

    let host = DetachedHost::new(Duration::from_secs(30));
    let ctx = p.init(&host);
    let (a, mut b) = (peer(0, 1), peer(1, 2));
    let can = t.can_connect.unwrap();
    // SAFETY: valid context and peer records.
    unsafe {
        assert_eq!(can(ctx, &a, &b), 10, "same host");
        b.host_hash ^= 1;
        assert_eq!(can(ctx, &a, &b), 0, "other host");
        assert_eq!(
            can(ctx, &a, std::ptr::null()),
            0,
            "null peer is 'cannot', not a crash"
        );
    }
    p.finalize(ctx);

    // With a logging host, init writes one info line.
    let abort = AtomicU32::new(0);
    let host = FxHostV1 {
        abi_version: FX_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxHostV1>() as u32,
        host_ctx: null_mut(),
        log: Some(capture_log),
        getenv: None,
        timeout_ms: 1000,
        abort_flag: &abort,
    };
    let ctx = p.init_raw(&host);
    p.finalize(ctx);
    let logged = LOGGED.lock().unwrap();
    assert!(
        logged
            .iter()
            .any(|(lvl, m)| *lvl == FX_LOG_INFO && m.contains("c-pipe")),
        "no info line from init: {logged:?}"
    );
}

#[test]
fn misuse_returns_error_codes() {
    let Some(cc) = compiler("misuse_returns_error_codes") else {
        return;
    };
    let dir = common::TempDir::new("cpipe-misuse");
    let p = Plugin::load(&build_plugin(&cc, dir.path()));
    let t = p.t();
    let host = DetachedHost::new(Duration::from_secs(30));
    let ctx = p.init(&host);
    let mut req = null_mut();
    let byte = [0u8; 4];
    let mut sink = [0u8; 4];

    // Each case: the code, and a non-empty last-error text mentioning `needle`.
    let expect = |what: &str, rc: i32, code: i32, needle: &str| {
        assert_eq!(
            rc,
            code,
            "{what}: got {} ({}), expected {}",
            code_name(rc),
            p.last_error(),
            code_name(code)
        );
        let msg = p.last_error();
        assert!(
            !msg.is_empty() && msg.contains(needle),
            "{what}: last_error '{msg}' lacks '{needle}'"
        );
    };
    // SAFETY: every call passes null or valid pointers; the plugin must reject the nulls.
    unsafe {
        let data = byte.as_ptr() as *const c_void;
        expect(
            "isend(null conn)",
            t.isend.unwrap()(null_mut(), data, 4, null_mut(), &mut req),
            FX_INVALID_ARGUMENT,
            "conn",
        );
        assert!(req.is_null(), "a failed isend must leave *request NULL");
        let sink_ptr = sink.as_mut_ptr() as *mut c_void;
        expect(
            "irecv(null conn)",
            t.irecv.unwrap()(null_mut(), sink_ptr, 4, null_mut(), &mut req),
            FX_INVALID_ARGUMENT,
            "conn",
        );
        let (mut done, mut n) = (0, 0usize);
        expect(
            "test(null)",
            t.test.unwrap()(null_mut(), &mut done, &mut n),
            FX_INVALID_ARGUMENT,
            "request",
        );
        expect(
            "connect(null conn)",
            t.connect.unwrap()(null_mut(), &FxBlob::new()),
            FX_INVALID_ARGUMENT,
            "conn",
        );
        expect(
            "free(null)",
            t.free.unwrap()(null_mut()),
            FX_INVALID_ARGUMENT,
            "conn",
        );
        expect(
            "finalize(null)",
            t.finalize.unwrap()(null_mut()),
            FX_INVALID_ARGUMENT,
            "ctx",
        );
        let mut conn = null_mut();
        let mut blob = FxBlob::new();
        expect(
            "setup(null req)",
            t.setup.unwrap()(ctx, std::ptr::null(), &mut conn, &mut blob),
            FX_INVALID_ARGUMENT,
            "req",
        );
        let mut bad = conn_req(FX_DIR_SEND, 1);
        bad.direction = 7;
        expect(
            "setup(direction 7)",
            t.setup.unwrap()(ctx, &bad, &mut conn, &mut blob),
            FX_INVALID_ARGUMENT,
            "direction",
        );
    }

    let (rx, rx_blob) = p.setup(ctx, &conn_req(FX_DIR_RECV, 42));
    let (tx, tx_blob) = p.setup(ctx, &conn_req(FX_DIR_SEND, 42));
    let (other, other_blob) = p.setup(ctx, &conn_req(FX_DIR_RECV, 43));
    // SAFETY: live connections, valid pointers.
    unsafe {
        let data = byte.as_ptr() as *const c_void;
        expect(
            "isend before connect",
            t.isend.unwrap()(tx, data, 4, null_mut(), &mut req),
            FX_INVALID_ARGUMENT,
            "not connected",
        );
        expect(
            "isend on a receiving end",
            t.isend.unwrap()(rx, data, 4, null_mut(), &mut req),
            FX_INVALID_ARGUMENT,
            "receiving",
        );
        expect(
            "isend(null request ptr)",
            t.isend.unwrap()(tx, data, 4, null_mut(), null_mut()),
            FX_INVALID_ARGUMENT,
            "request",
        );
        expect(
            "isend(null data, len 4)",
            t.isend.unwrap()(tx, std::ptr::null(), 4, null_mut(), &mut req),
            FX_INVALID_ARGUMENT,
            "NULL",
        );
        expect(
            "connect(null blob)",
            t.connect.unwrap()(tx, std::ptr::null()),
            FX_INVALID_ARGUMENT,
            "blob",
        );
        expect(
            "connect(empty blob)",
            t.connect.unwrap()(tx, &FxBlob::new()),
            FX_INVALID_ARGUMENT,
            "0 bytes",
        );
        let mut garbage = rx_blob;
        garbage.bytes[0] ^= 0xff;
        expect(
            "connect(corrupt blob)",
            t.connect.unwrap()(tx, &garbage),
            FX_INVALID_ARGUMENT,
            "magic",
        );
        expect(
            "connect(another conn's blob)",
            t.connect.unwrap()(tx, &other_blob),
            FX_INVALID_ARGUMENT,
            "connection 43",
        );
        expect(
            "connect(same direction)",
            t.connect.unwrap()(rx, &rx_blob),
            FX_INVALID_ARGUMENT,
            "receiving ends",
        );
    }
    // After all that, the right blobs still connect, and data flows.
    p.connect_all(&[(tx, &rx_blob), (rx, &tx_blob)]);
    let msg = pattern(3, 9);
    let s = p.isend(tx, &msg);
    let mut got = [0u8; 3];
    let r = p.irecv(rx, &mut got);
    assert_eq!(p.wait(s), Ok(3));
    assert_eq!(p.wait(r), Ok(3));
    assert_eq!(&got[..], &msg[..]);
    // A null `done` is an error that leaves the request alive.
    let r = p.irecv(rx, &mut got);
    // SAFETY: a live request; null done/nbytes must be rejected.
    let rc = unsafe { t.test.unwrap()(r, null_mut(), null_mut()) };
    assert_eq!(rc, FX_INVALID_ARGUMENT);
    p.free(rx); // frees the outstanding receive with it
    p.free(tx);
    p.free(other);
    p.finalize(ctx);
}

#[test]
fn in_process_loopback() {
    let Some(cc) = compiler("in_process_loopback") else {
        return;
    };
    let dir = common::TempDir::new("cpipe-loop");
    let p = Plugin::load(&build_plugin(&cc, dir.path()));
    let host = DetachedHost::new(Duration::from_secs(30));
    let ctx = p.init(&host);
    let (rx, rx_blob) = p.setup(ctx, &conn_req(FX_DIR_RECV, 7));
    let (tx, tx_blob) = p.setup(ctx, &conn_req(FX_DIR_SEND, 7));
    p.connect_all(&[(rx, &tx_blob), (tx, &rx_blob)]);

    // Every size, posted receive first for half of them, sender first for the others.
    for (i, &size) in SIZES.iter().enumerate() {
        let msg = pattern(size, i);
        let mut buf = vec![0u8; size + 5]; // a receive may be larger than the message
        let (s, r) = if i % 2 == 0 {
            let r = p.irecv(rx, &mut buf);
            (p.isend(tx, &msg), r)
        } else {
            let s = p.isend(tx, &msg);
            (s, p.irecv(rx, &mut buf))
        };
        // Alternate tests so neither side has to finish first (1 MiB > socket buffer).
        let (mut sd, mut rd) = (None, None);
        let start = Instant::now();
        while sd.is_none() || rd.is_none() {
            for (req, slot) in [(s, &mut sd), (r, &mut rd)] {
                if slot.is_some() {
                    continue;
                }
                let (mut done, mut n) = (0, 0usize);
                // SAFETY: a live request (we stop testing it once done).
                let rc = unsafe { p.t().test.unwrap()(req, &mut done, &mut n) };
                assert_eq!(rc, FX_OK, "test: {}", p.last_error());
                if done != 0 {
                    *slot = Some(n);
                }
            }
            assert!(start.elapsed() < DEADLINE);
        }
        assert_eq!((sd, rd), (Some(size), Some(size)), "size {size}");
        assert!(buf[..size] == msg[..], "payload of {size} bytes differs");
    }

    // Too small a receive: an error naming both sizes, and the stream stays in step.
    let big = pattern(OVERSIZE.0, 1);
    let next = pattern(AFTER_OVERSIZE, 2);
    let s1 = p.isend(tx, &big);
    let s2 = p.isend(tx, &next);
    let mut small = vec![0u8; OVERSIZE.1];
    let mut after = vec![0u8; AFTER_OVERSIZE];
    let r1 = p.irecv(rx, &mut small);
    let r2 = p.irecv(rx, &mut after);
    let (code, msg) = p.wait(r1).unwrap_err();
    assert_eq!(code, FX_INVALID_ARGUMENT, "{msg}");
    assert!(
        msg.contains(&OVERSIZE.0.to_string()) && msg.contains(&OVERSIZE.1.to_string()),
        "{msg}"
    );
    assert_eq!(p.wait(r2), Ok(AFTER_OVERSIZE));
    assert_eq!(after, next);
    assert_eq!(p.wait(s1), Ok(OVERSIZE.0));
    assert_eq!(p.wait(s2), Ok(AFTER_OVERSIZE));

    // The sender goes away: a pending receive fails with FX_REMOTE.
    let mut buf = [0u8; 8];
    let r = p.irecv(rx, &mut buf);
    p.free(tx);
    let (code, msg) = p.wait(r).unwrap_err();
    assert_eq!(code, FX_REMOTE, "{msg}");
    assert!(msg.contains("closed"), "{msg}");
    p.free(rx);
    p.finalize(ctx);
}

// ---------------------------------------------------------------------------

/// The receiving process: set up, print the blob, read the sender's, receive, verify.
fn receiver_main() {
    let so = std::env::var(SO_ENV).expect("plugin path from the parent");
    let conn_id: u64 = std::env::var(CONN_ENV).expect("conn id").parse().unwrap();
    let p = Plugin::load(Path::new(&so));
    let host = DetachedHost::new(Duration::from_secs(30));
    let ctx = p.init(&host);
    let (rx, blob) = p.setup(ctx, &conn_req(FX_DIR_RECV, conn_id));
    let mut out = std::io::stdout();
    writeln!(out, "CPIPE-BLOB {}", blob_to_hex(&blob)).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("reading the sender's blob");
    let peer_blob = blob_from_hex(line.trim());
    p.connect_all(&[(rx, &peer_blob)]);

    // Main sizes plus many small ones, all posted before any test.
    let sizes: Vec<usize> = SIZES
        .iter()
        .copied()
        .chain((0..IN_FLIGHT).map(in_flight_size))
        .collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xa5u8; n]).collect();
    let reqs: Vec<*mut c_void> = bufs.iter_mut().map(|b| p.irecv(rx, b)).collect();
    for (i, (req, &size)) in reqs.into_iter().zip(&sizes).enumerate() {
        assert_eq!(p.wait(req), Ok(size), "message {i}");
        assert!(
            bufs[i] == pattern(size, i),
            "message {i} ({size} bytes) differs"
        );
    }

    let mut small = vec![0u8; OVERSIZE.1];
    let r = p.irecv(rx, &mut small);
    let (code, msg) = p.wait(r).unwrap_err();
    assert_eq!(code, FX_INVALID_ARGUMENT, "{msg}");
    assert!(
        msg.contains(&OVERSIZE.0.to_string()) && msg.contains(&OVERSIZE.1.to_string()),
        "{msg}"
    );
    let mut after = vec![0u8; AFTER_OVERSIZE];
    let r = p.irecv(rx, &mut after);
    assert_eq!(p.wait(r), Ok(AFTER_OVERSIZE));
    assert_eq!(after, pattern(AFTER_OVERSIZE, 1000));

    // The parent frees its end after its sends: the next receive sees FX_REMOTE.
    let mut one = [0u8; 1];
    let r = p.irecv(rx, &mut one);
    let (code, msg) = p.wait(r).unwrap_err();
    assert_eq!(code, FX_REMOTE, "{msg}");

    p.free(rx);
    p.finalize(ctx);
    writeln!(out, "CPIPE-RESULT ok {} messages verified", sizes.len() + 1).unwrap();
    out.flush().unwrap();
}

/// Kills the receiver if the parent fails first (no stray process).
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn two_process_transfer() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("receiver") {
        receiver_main();
        return;
    }
    let Some(cc) = compiler("two_process_transfer") else {
        return;
    };
    let dir = common::TempDir::new("cpipe-2proc");
    let so = build_plugin(&cc, dir.path());
    let conn_id = 0x5eed_0000_0000_0000u64 | u64::from(std::process::id());

    let mut child = ChildGuard(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "two_process_transfer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, "receiver")
            .env(SO_ENV, &so)
            .env(CONN_ENV, conn_id.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("re-executing the test binary as the receiver"),
    );
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let next_marked = |prefix: &str, seen: &mut Vec<String>| -> String {
        let start = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(start.elapsed());
            match lines.recv_timeout(left) {
                Ok(l) => {
                    seen.push(l.clone());
                    // The harness may have printed "test ... " on the same line.
                    if let Some(at) = l.find(prefix) {
                        return l[at + prefix.len()..].to_string();
                    }
                }
                Err(e) => panic!(
                    "no '{prefix}' line from the receiver ({e}); its output:\n{}",
                    seen.join("\n")
                ),
            }
        }
    };

    let p = Plugin::load(&so);
    let host = DetachedHost::new(Duration::from_secs(30));
    let ctx = p.init(&host);
    let (tx, blob) = p.setup(ctx, &conn_req(FX_DIR_SEND, conn_id));
    let rx_blob = blob_from_hex(next_marked("CPIPE-BLOB ", &mut seen).trim());
    {
        let mut stdin = child.0.stdin.take().unwrap();
        writeln!(stdin, "{}", blob_to_hex(&blob)).unwrap();
    }
    p.connect_all(&[(tx, &rx_blob)]);

    let sizes: Vec<usize> = SIZES
        .iter()
        .copied()
        .chain((0..IN_FLIGHT).map(in_flight_size))
        .collect();
    let mut msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i))
        .collect();
    msgs.push(pattern(OVERSIZE.0, 999));
    msgs.push(pattern(AFTER_OVERSIZE, 1000));
    let reqs: Vec<*mut c_void> = msgs.iter().map(|m| p.isend(tx, m)).collect();
    assert!(reqs.len() >= 32, "at least 32 requests in flight");
    for (i, req) in reqs.into_iter().enumerate() {
        assert_eq!(p.wait(req), Ok(msgs[i].len()), "send {i}");
    }
    p.free(tx); // the receiver's last receive must now fail with FX_REMOTE
    p.finalize(ctx);

    let result = next_marked("CPIPE-RESULT ", &mut seen);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            panic!("receiver did not exit; output:\n{}", seen.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    reader.join().unwrap();
    assert!(
        status.success(),
        "receiver failed ({status}); output:\n{}",
        seen.join("\n")
    );
    assert!(result.starts_with("ok"), "{result}");
    println!("two_process_transfer: receiver says: {result}");
}

// ---------------------------------------------------------------------------

#[test]
fn library_without_entry_symbol_has_no_table() {
    let Some(cc) = compiler("library_without_entry_symbol_has_no_table") else {
        return;
    };
    let dir = common::TempDir::new("cpipe-nosym");
    let src = dir.path().join("not_a_plugin.c");
    let so = dir.path().join("libferrocx_plugin_nothing.so");
    std::fs::write(&src, "int not_a_plugin(void) { return 42; }\n").unwrap();
    cc.run(&[
        "-std=c99",
        "-Wall",
        "-Werror",
        "-fPIC",
        "-shared",
        "-o",
        so.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    // SAFETY: a library with one trivial function and no initializers.
    let lib = unsafe { Library::new(&so) }.expect("dlopen of a valid library");
    // SAFETY: only looked up, never called with a wrong signature.
    unsafe {
        assert!(
            lib.get::<FxTransportV1Entry>(FX_SYMBOL_V1.as_bytes())
                .is_err(),
            "found an entry point that is not there"
        );
        let f = lib
            .get::<unsafe extern "C" fn() -> i32>(b"not_a_plugin")
            .expect("the library's own symbol");
        assert_eq!(f(), 42);
    }
}
