//! The two-process part of the battery. The kit (sender, "rank 0") drives a
//! child copy of fxinfo (receiver, "rank 1") over its stdin/stdout with
//! one-line messages; blobs travel hex-encoded, as plain bytes.

use super::report::Report;
use super::STEP_TIMEOUT;
use ferrocx::collective::CollectiveLib;
use ferrocx::devnet::DevnetLib;
use ferrocx::plugin::library::open_library;
use ferrocx::plugin::{PluginInstance, PluginLib, RawConn, RawRequest};
use ferrocx_sdk::abi::*;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Instant;

const SIZES: [usize; 6] = [0, 1, 7, 4097, (1 << 20) + 3, (16 << 20) + 1];
const IN_FLIGHT: usize = 64;

fn pattern(size: usize, i: usize) -> u8 {
    (i.wrapping_mul(13) ^ size.wrapping_mul(7) ^ (i >> 9)) as u8
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn blob_line(b: &FxBlob) -> String {
    format!("BLOB {}", hex(b.as_bytes()))
}

fn parse_blob(line: &str) -> Option<FxBlob> {
    // An empty blob is the line "BLOB " and lines are trimmed on the way: "BLOB" is one too.
    let rest = line.strip_prefix("BLOB")?;
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    let bytes = unhex(rest.trim())?;
    let mut b = FxBlob::new();
    if bytes.len() > FX_BLOB_BYTES {
        return None;
    }
    b.bytes[..bytes.len()].copy_from_slice(&bytes);
    b.len = bytes.len() as u32;
    Some(b)
}

fn info(rank: i32, pid: u32) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.local_rank = rank;
    p.pid = pid as i32;
    p.host_hash = ferrocx::bootstrap::host_hash();
    p.comm_hash = 0x636865636b; // "check"
    p.set_host_name(&ferrocx::bootstrap::host_name());
    p
}

fn conn_req(me: FxPeerInfo, peer: FxPeerInfo, dir: i32) -> FxConnReq {
    FxConnReq {
        me,
        peer,
        direction: dir,
        channel: 0,
        conn_id: 0xc0ffee,
    }
}

fn connect_loop(inst: &PluginInstance, conn: RawConn, blob: &FxBlob) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match inst.connect(conn, blob, 0) {
            Ok(true) => return Ok(()),
            Ok(false) if start.elapsed() < STEP_TIMEOUT => {
                std::thread::sleep(std::time::Duration::from_micros(200))
            }
            Ok(false) => return Err(format!("connect still in progress after {STEP_TIMEOUT:?}")),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Test until done; returns nbytes.
fn wait(inst: &PluginInstance, req: RawRequest) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        match inst.test(req, 0, "test") {
            Ok(Some(n)) => return Ok(n),
            Ok(None) if start.elapsed() < STEP_TIMEOUT => std::hint::spin_loop(),
            Ok(None) => return Err(format!("request not done after {STEP_TIMEOUT:?}")),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Post until the plugin takes it (`None` request = retry).
fn post(mut f: impl FnMut() -> ferrocx::Result<Option<RawRequest>>) -> Result<RawRequest, String> {
    let start = Instant::now();
    loop {
        match f() {
            Ok(Some(r)) => return Ok(r),
            Ok(None) if start.elapsed() < STEP_TIMEOUT => std::thread::yield_now(),
            Ok(None) => return Err("the plugin never accepted the request".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

struct ChildPeer {
    child: Child,
    tx: ChildStdin,
    rx: BufReader<ChildStdout>,
}

impl ChildPeer {
    fn spawn(path: &str, role: &str) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["--check-child", path, role, &std::process::id().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the peer process: {e}"))?;
        let tx = child.stdin.take().ok_or("no stdin")?;
        let rx = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(ChildPeer { child, tx, rx })
    }
    fn send(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.tx, "{line}")
            .and_then(|_| self.tx.flush())
            .map_err(|e| format!("peer process gone: {e}"))
    }
    fn line(&mut self) -> Result<String, String> {
        let mut s = String::new();
        match self.rx.read_line(&mut s) {
            Ok(0) => Err(self.exit_reason()),
            Ok(_) => Ok(s.trim_end().to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
    fn exit_reason(&mut self) -> String {
        match self.child.wait() {
            Ok(st) => format!("peer process ended ({st})"),
            Err(e) => format!("peer process lost: {e}"),
        }
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connect to a child receiver and run the transfer checks.
pub fn run_pair(lib: &Arc<PluginLib>, path: &str, rep: &mut Report) {
    let abort = Arc::new(AtomicU32::new(0));
    let inst = match PluginInstance::init(lib.clone(), STEP_TIMEOUT, abort) {
        Ok(i) => i,
        Err(e) => return rep.fail("init", e.to_string()),
    };
    let mut peer = match ChildPeer::spawn(path, "recv") {
        Ok(p) => p,
        Err(e) => return rep.fail("blob round-trip", e),
    };
    let me = info(0, std::process::id());
    let them = info(1, peer.child.id());
    let score = inst.can_connect(&me, &them);
    if score <= 0 {
        rep.skip(
            "can_connect",
            "the plugin declines a same-host peer (score 0): transfer checks cannot run here"
                .into(),
        );
        return;
    }
    rep.pass("can_connect", format!("same-host peer scored {score}"));
    let outcome = (|| -> Result<RawConn, String> {
        let child_blob = parse_blob(&peer.line()?).ok_or("peer sent no blob")?;
        let (conn, blob) = inst
            .setup(&conn_req(me, them, FX_DIR_SEND))
            .map_err(|e| e.to_string())?;
        peer.send(&blob_line(&blob))?;
        connect_loop(&inst, conn, &child_blob)?;
        match peer.line()?.as_str() {
            "CONNECTED" => Ok(conn),
            other => Err(format!("peer: {other}")),
        }
    })();
    let conn = match outcome {
        Ok(c) => {
            rep.pass(
                "blob round-trip",
                "setup, blobs exchanged between two processes, connect done on both".into(),
            );
            c
        }
        Err(e) => return rep.fail("blob round-trip", e),
    };
    for size in SIZES {
        let data: Vec<u8> = (0..size).map(|i| pattern(size, i)).collect();
        let r = (|| -> Result<(), String> {
            // SAFETY: `data` outlives the request (we wait for it below).
            let req = post(|| unsafe { inst.isend(conn, data.as_ptr(), size, None, 1) })?;
            wait(&inst, req)?;
            match peer
                .line()?
                .split_whitespace()
                .collect::<Vec<_>>()
                .as_slice()
            {
                ["RECV", n, "0"] if *n == size.to_string() => Ok(()),
                other => Err(format!("peer reported {other:?}")),
            }
        })();
        match r {
            Ok(()) => rep.pass(
                &format!("transfer {size} B"),
                "bytes verified by the peer".into(),
            ),
            Err(e) => {
                rep.fail(&format!("transfer {size} B"), e);
                return;
            }
        }
    }
    let r = (|| -> Result<(), String> {
        let bufs: Vec<Vec<u8>> = (0..IN_FLIGHT)
            .map(|k| (0..1000 + k).map(|i| pattern(k, i)).collect())
            .collect();
        let mut reqs = Vec::new();
        for b in &bufs {
            // SAFETY: `bufs` outlives every request.
            reqs.push(post(|| unsafe {
                inst.isend(conn, b.as_ptr(), b.len(), None, 1)
            })?);
        }
        for r in reqs.into_iter().rev() {
            wait(&inst, r)?;
        }
        match peer.line()?.as_str() {
            "INFLIGHT 0" => Ok(()),
            other => Err(format!("peer reported {other}")),
        }
    })();
    match r {
        Ok(()) => rep.pass(
            "requests in flight",
            format!(
                "{IN_FLIGHT} sends posted before any completed, completed out of order, verified"
            ),
        ),
        Err(e) => return rep.fail("requests in flight", e),
    }
    let r = (|| -> Result<String, String> {
        let data = [7u8; 100];
        // SAFETY: `data` outlives the request.
        let req = post(|| unsafe { inst.isend(conn, data.as_ptr(), data.len(), None, 1) })?;
        // The sender may finish or fail; only the receiver's answer matters.
        let _ = wait(&inst, req);
        let line = peer.line()?;
        match line.strip_prefix("SHORT error ") {
            Some(msg) => Ok(msg.to_string()),
            None => Err(format!(
                "a 100-byte message into a 10-byte receive was accepted: {line}"
            )),
        }
    })();
    match r {
        Ok(msg) => rep.pass("receive too small", format!("error: {msg}")),
        Err(e) => rep.fail("receive too small", e),
    }
    if let Err(e) = inst.free(conn, 1) {
        rep.fail("free", e.to_string());
    }
}

/// Run the misuse checks in a child that may crash.
pub fn run_misuse(path: &str, rep: &mut Report) {
    run_child(path, "misuse", "misuse ", rep)
}

/// Run a battery in a child that may crash: it prints `TRY name` before each
/// step and `OK`/`BAD`/`SKIP name<TAB>detail` after, then `DONE`.
pub fn run_child(path: &str, role: &str, prefix: &str, rep: &mut Report) {
    let mut peer = match ChildPeer::spawn(path, role) {
        Ok(p) => p,
        Err(e) => return rep.fail(role, e),
    };
    let mut current = String::from("(start)");
    let split = |l: &str| {
        let (n, d) = l.split_once('\t').unwrap_or((l, ""));
        (format!("{prefix}{n}"), d.to_string())
    };
    loop {
        match peer.line() {
            Ok(l) if l.starts_with("TRY ") => current = split(&l[4..]).0,
            Ok(l) if l.starts_with("OK ") => {
                let (n, d) = split(&l[3..]);
                rep.pass(&n, d);
            }
            Ok(l) if l.starts_with("BAD ") => {
                let (n, d) = split(&l[4..]);
                rep.fail(&n, d);
            }
            Ok(l) if l.starts_with("SKIP ") => {
                let (n, d) = split(&l[5..]);
                rep.skip(&n, d);
            }
            Ok(l) if l == "DONE" => return,
            Ok(l) => return rep.fail(role, format!("unexpected line from peer: {l}")),
            Err(e) => return rep.fail(&current, format!("the plugin crashed the process: {e}")),
        }
    }
}

/// `fxinfo --check-child PATH ROLE PARENT_PID` (internal).
pub fn child_main(args: &[String]) -> ExitCode {
    let (Some(path), Some(role)) = (args.first(), args.get(1)) else {
        return ExitCode::from(2);
    };
    let parent: u32 = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
    // The batteries of the per-communicator tables run on the table alone.
    let table: Option<Result<(), String>> = match role.as_str() {
        "devnet" => Some(
            open_library(Path::new(path))
                .and_then(|l| {
                    DevnetLib::from_library(&l, Path::new(path)).unwrap_or_else(|| {
                        Err(ferrocx::Error::InvalidArgument("no devnet table".into()))
                    })
                })
                .map_err(|e| e.to_string())
                .and_then(|l| super::devnet::child(l.table())),
        ),
        "collective" => Some(
            open_library(Path::new(path))
                .and_then(|l| {
                    CollectiveLib::from_library(&l, Path::new(path)).unwrap_or_else(|| {
                        Err(ferrocx::Error::InvalidArgument(
                            "no collective table".into(),
                        ))
                    })
                })
                .map_err(|e| e.to_string())
                .and_then(|l| super::collective::child(l.table())),
        ),
        _ => None,
    };
    if let Some(r) = table {
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("ERROR {e}");
                ExitCode::from(1)
            }
        };
    }
    let lib = match PluginLib::load(Path::new(path)) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            println!("ERROR {e}");
            return ExitCode::from(1);
        }
    };
    let r = match role.as_str() {
        "recv" => child_recv(&lib, parent),
        "misuse" => child_misuse(&lib),
        _ => Err("unknown role".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("ERROR {e}");
            ExitCode::from(1)
        }
    }
}

fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn read_in() -> Result<String, String> {
    let mut s = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut s)
        .map_err(|e| e.to_string())?;
    Ok(s.trim_end().to_string())
}

fn child_recv(lib: &Arc<PluginLib>, parent: u32) -> Result<(), String> {
    let inst = PluginInstance::init(lib.clone(), STEP_TIMEOUT, Arc::new(AtomicU32::new(0)))
        .map_err(|e| e.to_string())?;
    let (me, them) = (info(1, std::process::id()), info(0, parent));
    let (conn, blob) = inst
        .setup(&conn_req(me, them, FX_DIR_RECV))
        .map_err(|e| e.to_string())?;
    out(&blob_line(&blob));
    let parent_blob = parse_blob(&read_in()?).ok_or("no blob from the kit")?;
    connect_loop(&inst, conn, &parent_blob)?;
    out("CONNECTED");
    for size in SIZES {
        let mut buf = vec![0xAAu8; size];
        // SAFETY: `buf` outlives the request.
        let req = post(|| unsafe { inst.irecv(conn, buf.as_mut_ptr(), size, None, 0) })?;
        let n = wait(&inst, req)?;
        let wrong = if n != size {
            size.max(1)
        } else {
            (0..size).filter(|&i| buf[i] != pattern(size, i)).count()
        };
        out(&format!("RECV {size} {wrong}"));
    }
    let mut bufs: Vec<Vec<u8>> = (0..IN_FLIGHT).map(|k| vec![0u8; 1000 + k]).collect();
    let mut reqs = Vec::new();
    for b in bufs.iter_mut() {
        let (p, l) = (b.as_mut_ptr(), b.len());
        // SAFETY: `bufs` outlives every request.
        reqs.push(post(|| unsafe { inst.irecv(conn, p, l, None, 0) })?);
    }
    let mut wrong = 0;
    for (k, r) in reqs.into_iter().enumerate().rev() {
        let n = wait(&inst, r)?;
        if n != bufs[k].len() {
            wrong += 1;
        }
        wrong += (0..bufs[k].len())
            .filter(|&i| bufs[k][i] != pattern(k, i))
            .count();
    }
    out(&format!("INFLIGHT {wrong}"));
    let mut small = vec![0u8; 10];
    // SAFETY: `small` outlives the request.
    let res = unsafe { inst.irecv(conn, small.as_mut_ptr(), small.len(), None, 0) };
    let verdict = match res {
        Err(e) => format!("SHORT error {e}"),
        Ok(None) => "SHORT noerror (never accepted)".into(),
        Ok(Some(req)) => match wait(&inst, req) {
            Err(e) => format!("SHORT error {e}"),
            Ok(n) => format!("SHORT noerror (completed with {n} bytes)"),
        },
    };
    out(&verdict);
    inst.free(conn, 0).map_err(|e| e.to_string())?;
    Ok(())
}

fn child_misuse(lib: &Arc<PluginLib>) -> Result<(), String> {
    let inst = PluginInstance::init(lib.clone(), STEP_TIMEOUT, Arc::new(AtomicU32::new(0)))
        .map_err(|e| e.to_string())?;
    let t = lib.table();
    let null = std::ptr::null_mut::<c_void>();
    let expect_err = |name: &str, f: &mut dyn FnMut() -> i32| {
        out(&format!("TRY {name}"));
        let code = f();
        if code == FX_OK || code == FX_IN_PROGRESS {
            out(&format!(
                "BAD {name}\treturned {} instead of an error",
                code_name(code)
            ));
        } else {
            out(&format!("OK {name}\t-> {}", code_name(code)));
        }
    };
    let mut req: *mut c_void = null;
    let mut blob = FxBlob::new();
    let data = [0u8; 16];
    // SAFETY (all calls below): deliberately invalid arguments; a conforming
    // plugin must reject them with an error code. A crash is what we test for.
    if let Some(f) = t.isend {
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("isend(null conn)", &mut || unsafe {
            f(
                null,
                data.as_ptr() as *const c_void,
                16,
                null,
                &mut req as *mut _,
            )
        });
    }
    if let Some(f) = t.irecv {
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("irecv(null conn)", &mut || unsafe {
            f(
                null,
                data.as_ptr() as *mut c_void,
                16,
                null,
                &mut req as *mut _,
            )
        });
    }
    if let Some(f) = t.test {
        let (mut d, mut n) = (0i32, 0usize);
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("test(null request)", &mut || unsafe {
            f(null, &mut d as *mut i32, &mut n as *mut usize)
        });
    }
    if let Some(f) = t.connect {
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("connect(null conn)", &mut || unsafe { f(null, &blob) });
    }
    if let Some(f) = t.free {
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("free(null conn)", &mut || unsafe { f(null) });
    }
    if let Some(f) = t.setup {
        let mut conn = null;
        let ctx = inst_ctx(&inst);
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("setup(null request)", &mut || unsafe {
            f(
                ctx,
                std::ptr::null(),
                &mut conn as *mut _,
                &mut blob as *const _ as *mut FxBlob,
            )
        });
    }
    if let Some(f) = t.reg {
        let mut mh = null;
        let ctx = inst_ctx(&inst);
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("register(null buffer)", &mut || unsafe {
            f(
                ctx,
                null,
                64,
                FX_MEM_HOST,
                &mut mh as *mut _,
                &mut blob as *const _ as *mut FxBlob,
            )
        });
    }
    if let Some(f) = t.init {
        // SAFETY: deliberate misuse under test (see the note above).
        expect_err("init(null ctx out)", &mut || unsafe {
            f(std::ptr::null(), std::ptr::null_mut())
        });
    }
    out("TRY can_connect(null peers)");
    // SAFETY: as above.
    let score = unsafe {
        (t.can_connect.expect("validated"))(inst_ctx(&inst), std::ptr::null(), std::ptr::null())
    };
    out(&if score == 0 {
        "OK can_connect(null peers)\t-> 0".to_string()
    } else {
        format!("BAD can_connect(null peers)\treturned score {score}")
    });
    match t.last_error {
        Some(f) => {
            let mut buf = [0 as std::ffi::c_char; 256];
            // SAFETY: buffer of the given length.
            let n = unsafe { f(buf.as_mut_ptr(), buf.len()) };
            out(&if n > 0 {
                format!("OK last_error\t\"{}\"", c_chars_to_string(&buf))
            } else {
                "BAD last_error\tis empty after errors".into()
            });
        }
        None => out("OK last_error\t(hook absent)"),
    }
    out("DONE");
    drop(inst);
    Ok(())
}

fn inst_ctx(inst: &PluginInstance) -> *mut c_void {
    inst.raw_ctx()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_lines_round_trip_even_empty_and_trimmed() {
        for len in [0usize, 1, 17, FX_BLOB_BYTES] {
            let mut b = FxBlob::new();
            for (i, x) in b.bytes[..len].iter_mut().enumerate() {
                *x = i as u8 ^ 0x5a;
            }
            b.len = len as u32;
            let line = blob_line(&b);
            for l in [line.as_str(), line.trim_end()] {
                let back = parse_blob(l).unwrap_or_else(|| panic!("{len} B: {l:?} not parsed"));
                assert_eq!(back.as_bytes(), b.as_bytes(), "{len} B");
            }
        }
        assert!(parse_blob("BLOBab").is_none());
        assert!(parse_blob("BLOB abc").is_none());
        assert!(parse_blob("ERROR x").is_none());
    }
}
