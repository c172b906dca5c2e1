//! The conformance battery for collective plugins (`ferrocx_collective_v1`),
//! run in a child process so a crash is reported, not fatal: lifecycle,
//! comm_init on a one-rank communicator with in-process out-of-band
//! collectives, can_run on every collective (plain buffers and windows),
//! every collective the plugin accepts on host memory run and verified (one
//! rank: the output equals the input), window register/deregister, and misuse
//! (null handles and descriptors) answered by codes.

use super::child::{last_text, oob_all_gather, oob_barrier, say};
use ferrocx_sdk::abi::*;
use ferrocx_sdk::DetachedHost;
use std::ffi::c_void;
use std::ptr::null_mut;

fn last(t: &FxCollectiveV1) -> String {
    last_text(t.last_error)
}

fn desc(coll: i32, count: u64, send: *const u8, recv: *mut u8) -> FxCollDesc {
    FxCollDesc {
        coll,
        dtype: FX_TYPE_F32,
        op: FX_OP_SUM,
        root: 0,
        count,
        mem_kind: FX_MEM_HOST,
        flags: 0,
        send: send as *const c_void,
        recv: recv as *mut c_void,
        send_win: null_mut(),
        recv_win: null_mut(),
        send_offset: 0,
        recv_offset: 0,
        seq: 0,
    }
}

/// The child's side: print `TRY`/`OK`/`BAD`/`SKIP` lines, then `DONE`.
pub fn child(t: &FxCollectiveV1) -> Result<(), String> {
    let host = DetachedHost::new(super::STEP_TIMEOUT);
    let (init, fin) = (t.init.expect("validated"), t.finalize.expect("validated"));
    for round in 1..=2 {
        say("TRY", "lifecycle", "");
        let mut ctx = null_mut();
        // SAFETY: validated table; the host table outlives the context.
        let c = unsafe { init(host.as_ptr(), &mut ctx) };
        if c != FX_OK || ctx.is_null() {
            say(
                "BAD",
                "lifecycle",
                format!("init round {round}: {} {}", code_name(c), last(t)),
            );
            println!("DONE");
            return Ok(());
        }
        // SAFETY: the context just made.
        let c = unsafe { fin(ctx) };
        if c != FX_OK {
            say(
                "BAD",
                "lifecycle",
                format!("finalize round {round}: {}", code_name(c)),
            );
        }
    }
    say("OK", "lifecycle", "init + finalize, twice");
    let mut ctx = null_mut();
    // SAFETY: as above.
    unsafe { init(host.as_ptr(), &mut ctx) };
    let mut me = FxPeerInfo::zeroed();
    me.nranks = 1;
    me.pid = std::process::id() as i32;
    me.host_hash = ferrocx::bootstrap::host_hash();
    let info = FxCommInfo {
        rank: 0,
        nranks: 1,
        local_rank: 0,
        cuda_device: -1,
        comm_hash: 0x636865636b,
        peers: &me,
    };
    let oob = FxCommOob {
        oob_ctx: null_mut(),
        all_gather: Some(oob_all_gather),
        barrier: Some(oob_barrier),
    };
    let mut comm = null_mut();
    say("TRY", "comm_init", "");
    // SAFETY: live context; info, its peers and oob outlive the comm (this function).
    let c = unsafe { (t.comm_init.expect("validated"))(ctx, &info, &oob, &mut comm) };
    if c == FX_UNSUPPORTED {
        say(
            "SKIP",
            "comm_init",
            format!("nothing for a one-rank host communicator: {}", last(t)),
        );
        // SAFETY: live context.
        unsafe { fin(ctx) };
        println!("DONE");
        return Ok(());
    }
    if c != FX_OK || comm.is_null() {
        say("BAD", "comm_init", format!("{} {}", code_name(c), last(t)));
        // SAFETY: live context.
        unsafe { fin(ctx) };
        println!("DONE");
        return Ok(());
    }
    say(
        "OK",
        "comm_init",
        "one rank, in-process out-of-band collectives",
    );
    let can_run = t.can_run.expect("validated");
    let launch = t.launch.expect("validated");
    say("TRY", "can_run(null desc)", "");
    // SAFETY: a live comm and a null descriptor: the plugin must answer 0.
    let p = unsafe { can_run(comm, std::ptr::null()) };
    say(
        if p == 0 { "OK" } else { "BAD" },
        "can_run(null desc)",
        format!("priority {p}"),
    );

    let count = 1000u64;
    let bytes = count as usize * 4;
    let mut send: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
    let mut recv = vec![0u8; bytes];
    let mut wins: Option<(*mut c_void, *mut c_void)> = None;
    if let (Some(reg), true) = (t.window_register, t.caps & FX_COLL_CAP_HOST_MEM != 0) {
        let one = |buf: &mut Vec<u8>| -> Result<*mut c_void, String> {
            let base = buf.as_mut_ptr() as *mut c_void;
            let addrs = [base as u64];
            let d = FxWindowDesc {
                base,
                bytes: buf.len() as u64,
                mem_kind: FX_MEM_HOST,
                reserved: 0,
                peer_bases: &base,
                peer_addrs: addrs.as_ptr(),
            };
            let mut w = null_mut();
            // SAFETY: live comm; the descriptor and its arrays live across the call.
            let c = unsafe { reg(comm, &d, &mut w) };
            if c != FX_OK {
                return Err(format!("{} {}", code_name(c), last(t)));
            }
            Ok(w)
        };
        say("TRY", "window_register", "");
        match (one(&mut send), one(&mut recv)) {
            (Ok(s), Ok(r)) => {
                say(
                    "OK",
                    "window_register",
                    format!("two host windows of {bytes} B"),
                );
                wins = Some((s, r));
            }
            (Err(e), _) | (_, Err(e)) => say("BAD", "window_register", e),
        }
    }
    let mut ran = Vec::new();
    for coll in [
        FX_COLL_BROADCAST,
        FX_COLL_REDUCE,
        FX_COLL_ALL_GATHER,
        FX_COLL_REDUCE_SCATTER,
        FX_COLL_ALL_REDUCE,
        FX_COLL_ALL_TO_ALL,
        FX_COLL_GATHER,
        FX_COLL_SCATTER,
    ] {
        let mut d = desc(coll, count, send.as_ptr(), recv.as_mut_ptr());
        if let Some((s, r)) = wins {
            d.flags |= if s.is_null() { 0 } else { FX_COLL_SEND_WINDOW }
                | if r.is_null() { 0 } else { FX_COLL_RECV_WINDOW };
            d.send_win = s;
            d.recv_win = r;
        }
        let name = format!("collective {coll}");
        say("TRY", &name, "can_run");
        // SAFETY: live comm; the descriptor's buffers live across the calls.
        let p = unsafe { can_run(comm, &d) };
        if p < 0 {
            say(
                "BAD",
                &name,
                format!("can_run returned {p} (a priority is never negative)"),
            );
            continue;
        }
        if p == 0 {
            continue;
        }
        recv.fill(0);
        say("TRY", &name, "launch");
        // SAFETY: as above; host memory, no stream.
        let c = unsafe { launch(comm, &d, null_mut()) };
        if c != FX_OK {
            say(
                "BAD",
                &name,
                format!(
                    "can_run said {p} but launch failed: {} {}",
                    code_name(c),
                    last(t)
                ),
            );
        } else if recv != send {
            say("BAD", &name, "one rank: the output differs from the input");
        } else {
            ran.push(coll);
        }
    }
    say(
        "OK",
        "collectives",
        format!("ran and verified on host memory: {ran:?} (FX_COLL_* numbers; others declined)"),
    );

    for (name, f) in [
        (
            "launch(null comm)",
            Box::new(|| {
                let d = desc(FX_COLL_ALL_GATHER, 1, send.as_ptr(), recv.as_mut_ptr());
                // SAFETY: deliberately a null comm: the plugin must return an error code.
                unsafe { launch(null_mut(), &d, null_mut()) }
            }) as Box<dyn FnMut() -> i32>,
        ),
        (
            "launch(null desc)",
            Box::new(|| {
                // SAFETY: deliberately a null descriptor.
                unsafe { launch(comm, std::ptr::null(), null_mut()) }
            }),
        ),
    ] {
        let mut f = f;
        say("TRY", name, "");
        let c = f();
        say(if c != FX_OK { "OK" } else { "BAD" }, name, code_name(c));
    }
    if let Some(dereg) = t.window_deregister {
        say("TRY", "window_deregister(null)", "");
        // SAFETY: deliberately a null window.
        let c = unsafe { dereg(comm, null_mut()) };
        say(
            if c != FX_OK { "OK" } else { "BAD" },
            "window_deregister(null)",
            code_name(c),
        );
        if let Some((s, r)) = wins {
            say("TRY", "window_deregister", "");
            let codes: Vec<i32> = [s, r]
                .into_iter()
                .filter(|w| !w.is_null())
                // SAFETY: windows from this comm's window_register.
                .map(|w| unsafe { dereg(comm, w) })
                .collect();
            let ok = codes.iter().all(|&c| c == FX_OK);
            say(
                if ok { "OK" } else { "BAD" },
                "window_deregister",
                format!("{codes:?}"),
            );
        }
    }
    say("TRY", "comm_destroy", "");
    // SAFETY: live comm, destroyed once; then the context.
    let (c, f) = unsafe { ((t.comm_destroy.expect("validated"))(comm), fin(ctx)) };
    say(
        if c == FX_OK && f == FX_OK {
            "OK"
        } else {
            "BAD"
        },
        "comm_destroy",
        format!("{} / finalize {}", code_name(c), code_name(f)),
    );
    println!("DONE");
    Ok(())
}
