//! The conformance battery for device-networking plugins
//! (`ferrocx_devnet_v1`), run in a child process so a crash is reported, not
//! fatal: lifecycle, comm_init on a one-rank communicator with in-process
//! out-of-band collectives (a plugin that cannot serve it must decline with
//! `FX_UNSUPPORTED` and a reason, as ibgda does without a GPU), then the
//! view, status, stats and describe of that comm, and misuse (null handles
//! and out-pointers) answered by codes.

use super::child::{last_text, oob_all_gather, oob_barrier, say};
use ferrocx_sdk::abi::*;
use ferrocx_sdk::DetachedHost;
use std::ffi::c_char;
use std::ptr::{null, null_mut};

fn last(t: &FxDevnetV1) -> String {
    last_text(t.last_error)
}

/// The child's side: print `TRY`/`OK`/`BAD`/`SKIP` lines, then `DONE`.
pub fn child(t: &FxDevnetV1) -> Result<(), String> {
    let host = DetachedHost::new(super::STEP_TIMEOUT);
    let (init, fin) = (t.init.expect("validated"), t.finalize.expect("validated"));
    say("TRY", "devnet lifecycle", "");
    for round in 1..=2 {
        let mut ctx = null_mut();
        // SAFETY: validated table; the host table outlives the context.
        let c = unsafe { init(host.as_ptr(), &mut ctx) };
        if c != FX_OK || ctx.is_null() {
            say(
                "BAD",
                "devnet lifecycle",
                format!("init round {round}: {} {}", code_name(c), last(t)),
            );
            println!("DONE");
            return Ok(());
        }
        // SAFETY: made just above, finalized once.
        let c = unsafe { fin(ctx) };
        if c != FX_OK {
            say(
                "BAD",
                "devnet lifecycle",
                format!("finalize round {round}: {}", code_name(c)),
            );
        }
    }
    say("OK", "devnet lifecycle", "init + finalize, twice");

    let mut ctx = null_mut();
    // SAFETY: as above.
    unsafe { init(host.as_ptr(), &mut ctx) };
    say("TRY", "devnet comm_init", "");
    let mut me = FxPeerInfo::zeroed();
    me.nranks = 1;
    me.pid = std::process::id() as i32;
    me.cuda_device = -1;
    me.cuda_pci = -1;
    let info = FxCommInfo {
        rank: 0,
        nranks: 1,
        local_rank: 0,
        cuda_device: match ferrocx_sdk::cuda::available() {
            Ok(n) if n > 0 => 0,
            _ => -1,
        },
        comm_hash: 0x5eed_c0de,
        peers: &me,
    };
    let oob = FxCommOob {
        oob_ctx: null_mut(),
        all_gather: Some(oob_all_gather),
        barrier: Some(oob_barrier),
    };
    let mut comm = null_mut();
    let c_init = t.comm_init.expect("validated");
    // SAFETY: a live context; `info`, its peer and `oob` live across the call and the comm.
    let c = unsafe { c_init(ctx, &info, &oob, &mut comm) };
    let served = match c {
        FX_OK if !comm.is_null() => {
            say(
                "OK",
                "devnet comm_init",
                "one rank, in-process out-of-band collectives",
            );
            true
        }
        FX_UNSUPPORTED => {
            let why = last(t);
            if why.trim().is_empty() || why.starts_with("(no") {
                say(
                    "BAD",
                    "devnet comm_init",
                    "FX_UNSUPPORTED without a reason (last_error)",
                );
            } else {
                say(
                    "OK",
                    "devnet comm_init",
                    format!("declined with a reason: {why}"),
                );
            }
            false
        }
        c => {
            say(
                "BAD",
                "devnet comm_init",
                format!("{} {}", code_name(c), last(t)),
            );
            false
        }
    };
    if served {
        say("TRY", "devnet view", "");
        let mut view = 0u64;
        // SAFETY: a live comm; a valid out-pointer.
        let c = unsafe { (t.device_view.expect("validated"))(comm, &mut view) };
        if c == FX_OK && view != 0 {
            say("OK", "devnet view", format!("device address {view:#x}"));
        } else {
            say(
                "BAD",
                "devnet view",
                format!("{} view {view:#x} {}", code_name(c), last(t)),
            );
        }
        say("TRY", "devnet status and stats", "");
        let mut s = FxDevnetStats::default();
        // SAFETY: a live comm; valid out-pointers.
        let (c1, c2) = unsafe {
            (
                (t.status.expect("validated"))(comm),
                (t.stats.expect("validated"))(comm, &mut s),
            )
        };
        if c1 == FX_OK && c2 == FX_OK && s == FxDevnetStats::default() {
            say(
                "OK",
                "devnet status and stats",
                "OK, every counter zero on a fresh comm",
            );
        } else {
            say(
                "BAD",
                "devnet status and stats",
                format!("{} {} {s:?}", code_name(c1), code_name(c2)),
            );
        }
        say("TRY", "devnet describe", "");
        let mut buf = vec![0 as c_char; 1024];
        // SAFETY: a live comm; a buffer of the given length.
        let n = unsafe { (t.describe.expect("validated"))(comm, buf.as_mut_ptr(), buf.len()) };
        let text = c_chars_to_string(&buf);
        if n > 0 && !text.is_empty() {
            say("OK", "devnet describe", text);
        } else {
            say("BAD", "devnet describe", "empty");
        }
        // SAFETY: a live comm, destroyed once.
        let c = unsafe { (t.comm_destroy.expect("validated"))(comm) };
        if c != FX_OK {
            say(
                "BAD",
                "devnet comm_destroy",
                format!("{} {}", code_name(c), last(t)),
            );
        }
    }
    say("TRY", "devnet misuse", "");
    let mut view = 0u64;
    // SAFETY: null handles and out-pointers are what is being checked: the
    // plugin must answer them with codes (the ABI's rule), not dereference them.
    let codes = unsafe {
        [
            (t.status.expect("validated"))(null_mut()),
            (t.device_view.expect("validated"))(null_mut(), &mut view),
            (t.stats.expect("validated"))(null_mut(), null_mut()),
            (t.window_register.expect("validated"))(null_mut(), null(), null_mut()),
            (t.window_deregister.expect("validated"))(null_mut(), 0),
            (t.comm_destroy.expect("validated"))(null_mut()),
            c_init(ctx, null(), &oob, &mut comm),
        ]
    };
    if codes.iter().all(|&c| c != FX_OK) {
        say(
            "OK",
            "devnet misuse",
            "null comm, descriptor and info refused with codes",
        );
    } else {
        say(
            "BAD",
            "devnet misuse",
            format!("a null argument returned FX_OK: {codes:?}"),
        );
    }
    // SAFETY: the context made above, finalized once.
    unsafe { fin(ctx) };
    println!("DONE");
    Ok(())
}
