//! SIGINT/SIGTERM/SIGHUP (and SIGUSR1, for status reports) capture for the launcher.
//!
//! The handler only bumps an atomic counter (async-signal-safe); the supervisor loop polls
//! [`take`] and forwards what arrived to the ranks. The previous dispositions are restored
//! when the [`Guard`] is dropped, so a library caller (fxperf) gets its own handlers back.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::c_int;

/// Signals the launcher catches and forwards (SIGUSR1 to rank 0 only: a status report).
pub(crate) const CAUGHT: [c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1];

static PENDING: [AtomicU32; 4] = [
    AtomicU32::new(0),
    AtomicU32::new(0),
    AtomicU32::new(0),
    AtomicU32::new(0),
];

extern "C" fn on_signal(sig: c_int) {
    for (slot, &s) in PENDING.iter().zip(CAUGHT.iter()) {
        if s == sig {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installed handlers; restores the previous ones on drop.
pub(crate) struct Guard {
    old: Vec<(c_int, libc::sigaction)>,
}

impl Guard {
    pub(crate) fn install() -> io::Result<Guard> {
        for slot in &PENDING {
            slot.store(0, Ordering::Relaxed);
        }
        let mut guard = Guard { old: Vec::new() };
        for &sig in &CAUGHT {
            // SAFETY: `sigaction` is a plain C struct for which all-zero bytes are a valid
            // (empty) value; every field we rely on is set below.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            // SAFETY: same as above for the previous-action output buffer.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
            unsafe { libc::sigemptyset(&mut sa.sa_mask) };
            // SAFETY: both pointers refer to live, properly aligned sigaction structs; the
            // handler only touches atomics, which is async-signal-safe.
            if unsafe { libc::sigaction(sig, &sa, &mut old) } != 0 {
                return Err(io::Error::last_os_error()); // `guard` drop restores the others
            }
            guard.old.push((sig, old));
        }
        Ok(guard)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for (sig, old) in self.old.drain(..) {
            // SAFETY: `old` was filled in by a successful sigaction call for this signal.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
    }
}

/// Signals received since the last call, in [`CAUGHT`] order, with how many of each.
pub(crate) fn take() -> Vec<(c_int, u32)> {
    PENDING
        .iter()
        .zip(CAUGHT.iter())
        .filter_map(|(slot, &sig)| {
            let n = slot.swap(0, Ordering::Relaxed);
            (n > 0).then_some((sig, n))
        })
        .collect()
}

/// Short name of a signal for messages ("SIGKILL"), or `None` if not a common one.
pub fn signal_name(sig: c_int) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// Sends `sig` to the process group led by `pid` (each rank leads its own group).
pub(crate) fn signal_group(pid: u32, sig: c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 0 {
        return;
    }
    // SAFETY: plain syscall with integer arguments; `-pid` names the rank's own process
    // group, which still exists because the rank (its leader) has not been reaped yet.
    unsafe { libc::kill(-pid, sig) };
}
