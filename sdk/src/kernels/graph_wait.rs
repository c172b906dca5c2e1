//! The graph barrier wait: a one-warp kernel that stands in for a barrier's
//! `WAIT_VALUE_32` stream operations where the barrier is captured into a
//! CUDA graph.
//!
//! A captured stream wait replays with its captured value and no way out: a
//! replay whose peer never arrives (it died, or never replayed its graph)
//! would wait forever, and the host cannot release it without corrupting the
//! next replay. This kernel polls the same flag words instead (thread `i`
//! the `i`-th), with the LL kernel's control words for a way out: it looks
//! at the abort word (raised by the host, e.g. ce's watchdog when a peer
//! died or the communicator broke) and at the clock every 256 polls, and
//! past [`GraphWaitArgs::timeout_ns`] from its start it records
//! [`ERR_BARRIER`] (with the peer waited for, plus one, in bits 32–63) in
//! the error word, raises the abort word (later waits give up at once) and
//! ends. A flag seen is followed by a system-scope fence before the kernel
//! ends, so the stream's later copies read what the peer wrote before its
//! flag.
//!
//! One copy of the kernel, in the module of `u8` sum (beside the
//! point-to-point kernel): it only compares words.

use super::ll::MAX_RANKS;
use std::ffi::c_void;

/// The kernel's entry point.
pub const NAME: &str = "ferrocx_graph_wait";

/// The error word's code: a captured barrier waited past the timeout.
pub const ERR_BARRIER: u64 = 4;

/// Threads of the one block (at least [`MAX_RANKS`]).
pub const THREADS: u32 = 32;

/// The kernel's one parameter, passed by value (`#[repr(C)]`, as the CUDA C
/// `fx_gw_args` below).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphWaitArgs {
    /// This rank's control words (`ll::CTL_WORDS`): abort and error.
    pub ctl: u64,
    /// Longest wait, from the kernel's start.
    pub timeout_ns: u64,
    /// Words to wait for (at most [`MAX_RANKS`]).
    pub n: u32,
    /// The value each must hold.
    pub value: u32,
    /// Their addresses (device memory of this context).
    pub addr: [u64; MAX_RANKS],
    /// The rank each word stands for (named in the error).
    pub peer: [u32; MAX_RANKS],
}

impl GraphWaitArgs {
    /// As a kernel parameter list.
    pub(crate) fn params(&mut self) -> [*mut c_void; 1] {
        [self as *mut GraphWaitArgs as *mut c_void]
    }
}

/// The CUDA C of the kernel (`FX_GW_MAX`, `FX_GW_ERR`, `FX_CTL_ABORT`,
/// `FX_CTL_ERROR` replaced by the module's builder).
pub const SOURCE: &str = r#"
struct fx_gw_args {
    unsigned long long ctl, timeout_ns;
    unsigned int n, value;
    unsigned long long addr[FX_GW_MAX];
    unsigned int peer[FX_GW_MAX];
};
extern "C" __global__ void ferrocx_graph_wait(const fx_gw_args a) {
    const unsigned int i = threadIdx.x;
    if (i >= a.n) return;
    volatile unsigned int* w = (volatile unsigned int*)a.addr[i];
    volatile unsigned long long* ctl = (volatile unsigned long long*)a.ctl;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned int k = 0;; ++k) {
        if (*w == a.value) {
            __threadfence_system();
            return;
        }
        if ((k & 255u) == 0u) {
            if (ctl[FX_CTL_ABORT] != 0ull) return;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t - t0 > a.timeout_ns) {
                atomicCAS((unsigned long long*)&ctl[FX_CTL_ERROR], 0ull,
                          FX_GW_ERR | ((unsigned long long)(a.peer[i] + 1u) << 32));
                ctl[FX_CTL_ABORT] = 1ull;
                __threadfence_system();
                return;
            }
        }
    }
}
"#;

/// [`SOURCE`] with its constants filled in.
pub fn source() -> String {
    SOURCE
        .replace("FX_GW_MAX", &MAX_RANKS.to_string())
        .replace("FX_GW_ERR", &format!("{ERR_BARRIER}ull"))
        .replace("FX_CTL_ABORT", &super::ll::CTL_ABORT.to_string())
        .replace("FX_CTL_ERROR", &super::ll::CTL_ERROR.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_c_layout() {
        // ctl, timeout_ns, n, value, 16 addresses, 16 peers.
        assert_eq!(
            std::mem::size_of::<GraphWaitArgs>(),
            8 + 8 + 4 + 4 + 8 * 16 + 4 * 16
        );
        assert_eq!(std::mem::offset_of!(GraphWaitArgs, addr), 24);
        assert_eq!(
            std::mem::offset_of!(GraphWaitArgs, peer),
            24 + 8 * MAX_RANKS
        );
        assert!(THREADS as usize >= MAX_RANKS);
        let s = source();
        assert!(!s.contains("FX_") && s.contains("ctl[2]") && s.contains("ctl[3]"));
        assert!(s.contains(NAME) && s.contains("4ull"));
    }
}
