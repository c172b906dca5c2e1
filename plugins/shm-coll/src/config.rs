//! Tunables of the shm-coll plugin, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_SHM_COLL_PRIORITY` | `150` | what `can_run` answers for a call shm-coll can run (0 = never; the core bids 100, ce 200) |
//! | `FERROCX_SHM_COLL_BYTES` | `64K` | the largest message between two ranks it takes: a call runs on shm-coll when each rank's block (`count` × element size) is at most this; also the size of each mailbox slot (0 = never) |
//! | `FERROCX_SHM_COLL_MAX_BYTES` | `256K` | the largest block it bids for, moved through the slots in chunks; above 4 ranks it shrinks as 4 / ranks (every rank reads and reduces every rank's block), never below a slot |
//! | `FERROCX_SHM_COLL_MEMORY` | `16M` | shared memory a communicator's mailboxes may take in all (2 × ranks² slots): with many ranks the slot, and so the largest block, shrinks to fit; with `FERROCX_CHECK_CALLS=0` or `deferred` what is left deepens the rings, up to 64 slots per pair (how many calls with blocks over 16 bytes a rank that receives nothing, such as a broadcast's root, may run ahead; with 16 bytes or less it runs 64 ahead, whatever the memory) |
//! | `FERROCX_SHM_COLL_P2P_BYTES` | `64K` | the largest host-memory send or receive it takes (through a ring of 8 slots of this size per pair and direction, besides the collectives' slots, shrinking with many ranks to fit `FERROCX_SHM_COLL_MEMORY`; 0 = none, at most 64K) |
//! | `FERROCX_SHM_COLL_MAX_RANKS` | `16` | the most ranks a communicator may have for shm-coll to take part (every rank writes to every peer in a call) |
//! | `FERROCX_CHECK_CALLS` | `1` | the call check ([`Check`]): `1` (`sync`), every pair exchanges in every call and a mismatch fails that call on every rank; `deferred`, messages go only where data does (a broadcast's root returns once posted and runs ahead through deep rings), every message is still compared by its receiver, and a rank that took nothing from a peer finds a difference at a later call; `0`, nothing compared |
//!
//! Every rank must decide alike, so `comm_init` takes the smallest
//! `FERROCX_SHM_COLL_BYTES`, `FERROCX_SHM_COLL_P2P_BYTES` and priority of all
//! ranks (`setup`).

use ferrocx_sdk::abi::FX_COLL_CORE_PRIORITY;
use ferrocx_sdk::{env, Host, PluginError, PluginResult};

/// Default bid: above the core's, below ce's.
pub const DEFAULT_PRIORITY: i32 = FX_COLL_CORE_PRIORITY * 3 / 2;
/// Default largest block. On the dev VM the mailboxes beat the core's path up
/// to 1 MiB at 2 and 4 ranks (docs/BENCH.md, issue 18); the cap keeps the shared
/// memory small (`DEFAULT_MEMORY`).
pub const DEFAULT_BYTES: usize = 64 << 10;
/// Default largest block bid for, chunked through the slots: below every
/// crossover with the core's path measured on the dev VM at 2 and 4 ranks
/// (docs/BENCH.md, issue 18).
pub const DEFAULT_MAX_BYTES: usize = 256 << 10;
/// Default shared memory of a communicator's mailboxes, in all.
pub const DEFAULT_MEMORY: usize = 16 << 20;
/// The smallest slot worth having.
pub const MIN_SLOT: usize = 64;
/// Default rank limit.
pub const DEFAULT_MAX_RANKS: usize = 16;
/// Largest accepted `FERROCX_SHM_COLL_BYTES`: slots are mapped by every rank.
pub const MAX_BYTES: usize = 1 << 20;
/// Default largest point-to-point message: the rings beat the core's path
/// (single copy by CMA from 16 KiB) at every size up to it — on the dev VM,
/// 2 ranks, 32 KiB in 2.8–3.9 µs against 8.8 (Open MPI 5.9), 4 ranks on 2
/// vCPUs 13–17 against 46 (docs/BENCH.md, session 19) — and cost small
/// messages nothing more than 4 KiB slots did.
pub const DEFAULT_P2P_BYTES: usize = 64 << 10;
/// Largest accepted `FERROCX_SHM_COLL_P2P_BYTES`.
pub const MAX_P2P_BYTES: usize = 64 << 10;

/// How calls are checked: [`ferrocx_sdk::env::CallCheck`], from `FERROCX_CHECK_CALLS`.
pub use ferrocx_sdk::env::CallCheck as Check;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_SHM_COLL_PRIORITY` (0 = never).
    pub priority: i32,
    /// `FERROCX_SHM_COLL_BYTES`: the largest block, and the slot size.
    pub bytes: usize,
    /// `FERROCX_SHM_COLL_MAX_BYTES`.
    pub max_bytes: usize,
    /// `FERROCX_SHM_COLL_MEMORY`.
    pub memory: usize,
    /// `FERROCX_SHM_COLL_P2P_BYTES` (0 = no point-to-point).
    pub p2p_bytes: usize,
    /// `FERROCX_SHM_COLL_MAX_RANKS`.
    pub max_ranks: usize,
    /// `FERROCX_CHECK_CALLS`.
    pub check: Check,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            priority: DEFAULT_PRIORITY,
            bytes: DEFAULT_BYTES,
            max_bytes: DEFAULT_MAX_BYTES,
            memory: DEFAULT_MEMORY,
            p2p_bytes: DEFAULT_P2P_BYTES,
            max_ranks: DEFAULT_MAX_RANKS,
            check: Check::Sync,
        }
    }
}

impl Config {
    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset or blank → default) and check them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let d = Config::default();
        let priority = env::priority(&lookup, "FERROCX_SHM_COLL_PRIORITY", d.priority)?;
        let bytes = env::unsigned(&lookup, "FERROCX_SHM_COLL_BYTES", d.bytes)?;
        if bytes > MAX_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_SHM_COLL_BYTES={bytes} is too large (at most {MAX_BYTES}: larger calls are the core's)"
            )));
        }
        let p2p_bytes = env::unsigned(&lookup, "FERROCX_SHM_COLL_P2P_BYTES", d.p2p_bytes)?;
        if p2p_bytes > MAX_P2P_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_SHM_COLL_P2P_BYTES={p2p_bytes} is too large (at most {MAX_P2P_BYTES}: larger messages are the core's)"
            )));
        }
        let check = env::call_check(&lookup)?;
        Ok(Config {
            priority,
            bytes,
            p2p_bytes,
            max_bytes: env::unsigned(&lookup, "FERROCX_SHM_COLL_MAX_BYTES", d.max_bytes)?,
            memory: env::unsigned(&lookup, "FERROCX_SHM_COLL_MEMORY", d.memory)?,
            max_ranks: env::unsigned(&lookup, "FERROCX_SHM_COLL_MAX_RANKS", d.max_ranks)?,
            check,
        })
    }

    /// Whether this configuration takes part at all.
    pub fn enabled(&self) -> bool {
        self.priority > 0 && self.bytes > 0 && self.max_ranks > 0
    }

    /// The largest point-to-point message for `nranks` ranks: `p2p_bytes`,
    /// shrunk so that the rings (`P2P_SLOTS` × nranks² slots) fit `memory`
    /// too; 0 for none.
    pub fn p2p_slot_bytes(&self, nranks: usize) -> usize {
        let slots = crate::layout::P2P_SLOTS * nranks.max(1) * nranks.max(1);
        self.p2p_bytes.min(self.memory / slots)
    }

    /// The slot for `nranks` ranks: `bytes`, shrunk so that the 2 × nranks²
    /// slots fit `memory` (whole cache lines); `None` below [`MIN_SLOT`].
    pub fn slot_bytes(&self, nranks: usize) -> Option<usize> {
        let pairs = 2 * nranks.max(1) * nranks.max(1);
        // Whole cache lines: chunks of a larger block then start on an element.
        Some(self.bytes.min(self.memory / pairs) / 64 * 64).filter(|&b| b >= MIN_SLOT)
    }

    /// Collective slots per pair for `nranks` ranks and slots of `slot`
    /// bytes: 2 with the synchronous check (every pair exchanges in every
    /// call: no rank gets further ahead); otherwise as many as `memory` holds,
    /// up to [`MAX_DEPTH`](crate::layout::MAX_DEPTH), a power of two — how many calls a rank
    /// that receives nothing may run ahead.
    pub fn depth(&self, nranks: usize, slot: usize) -> usize {
        if self.check == Check::Sync {
            return 2;
        }
        let ring = nranks.max(1) * nranks.max(1) * slot.max(1);
        let fits = (self.memory / ring).clamp(2, crate::layout::MAX_DEPTH);
        // A power of two: the slot of a message is a mask away.
        1 << fits.ilog2()
    }

    /// Collective heads per pair for rings of `depth` slots: as many as
    /// `depth` with the synchronous check (2: the calls' lockstep), otherwise
    /// [`MAX_DEPTH`](crate::layout::MAX_DEPTH) — a line each, so a rank that
    /// receives nothing runs that many small calls ahead whatever the slots'
    /// size (4 ranks on 2 vCPUs, 8-byte broadcast checked later, session 35:
    /// 16 deep 0.34–0.52 µs, 64 deep 0.22–0.33, Open MPI 0.24–0.28).
    pub fn heads(&self, depth: usize) -> usize {
        if self.check == Check::Sync {
            depth
        } else {
            crate::layout::MAX_DEPTH
        }
    }

    /// The largest block to bid for at `nranks` ranks: `max_bytes`, shrunk as
    /// 4 / ranks above 4 ranks.
    pub fn max_block(&self, nranks: usize) -> usize {
        self.max_bytes * 4 / nranks.max(4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: &[(&str, &str)]) -> PluginResult<Config> {
        Config::from_lookup(ferrocx_sdk::testing::vars(v))
    }

    #[test]
    fn defaults_names_and_limits() {
        let d = with(&[]).unwrap();
        assert_eq!(d, Config::default());
        assert!(d.enabled());
        assert!(d.priority > FX_COLL_CORE_PRIORITY);
        let c = with(&[
            ("FERROCX_SHM_COLL_PRIORITY", "0"),
            ("FERROCX_SHM_COLL_BYTES", "4K"),
            ("FERROCX_SHM_COLL_MAX_BYTES", "8K"),
            ("FERROCX_SHM_COLL_MEMORY", "1M"),
            ("FERROCX_SHM_COLL_MAX_RANKS", "8"),
            ("FERROCX_CHECK_CALLS", "0"),
            ("FERROCX_SHM_COLL_P2P_BYTES", "0"),
        ])
        .unwrap();
        assert_eq!(
            c,
            Config {
                priority: 0,
                bytes: 4096,
                max_bytes: 8192,
                memory: 1 << 20,
                max_ranks: 8,
                p2p_bytes: 0,
                check: Check::Off
            }
        );
        assert!(!c.enabled());
        assert!(!with(&[("FERROCX_SHM_COLL_BYTES", "0")]).unwrap().enabled());
        // The slot shrinks with the ranks to fit the memory.
        assert_eq!(d.slot_bytes(2), Some(64 << 10));
        assert_eq!(d.slot_bytes(16), Some(32 << 10));
        assert_eq!(d.slot_bytes(1000), None);
        assert_eq!(c.slot_bytes(8), Some(4096));
        assert_eq!(c.slot_bytes(16), Some(2048));
        // Checked, 2 slots per pair; unchecked, the rings deepen with what
        // memory is left, up to 64.
        assert_eq!(d.depth(2, 64 << 10), 2);
        let u = Config {
            check: Check::Off,
            ..d
        };
        assert_eq!(u.depth(2, 64 << 10), 64);
        let deferred = with(&[("FERROCX_CHECK_CALLS", "deferred")]).unwrap();
        assert_eq!(deferred.check, Check::Deferred);
        assert_eq!(deferred.depth(2, 64 << 10), 64);
        assert_eq!(with(&[("FERROCX_CHECK_CALLS", "sync")]).unwrap(), d);
        assert_eq!(u.depth(4, 64 << 10), 16);
        assert_eq!(u.depth(8, 64 << 10), 4);
        assert_eq!(u.depth(16, 32 << 10), 2);
        // Room for 48 slots per pair: 32, a power of two.
        let m = Config {
            memory: 12 << 20,
            ..u
        };
        assert_eq!(m.depth(2, 64 << 10), 32);
        assert_eq!(c.depth(16, 2048), 2);
        // Heads: as deep as the slots in lockstep, else 64 whatever the slots.
        assert_eq!(d.heads(2), 2);
        assert_eq!(u.heads(2), 64);
        assert_eq!(deferred.heads(16), 64);
        assert_eq!(d.max_block(2), 256 << 10);
        assert_eq!(d.max_block(16), 64 << 10);
        // Point-to-point messages: shrunk to fit, 0 stays 0.
        assert_eq!(d.p2p_slot_bytes(2), 64 << 10);
        assert_eq!(d.p2p_slot_bytes(8), 32 << 10);
        assert_eq!(d.p2p_slot_bytes(16), 8 << 10);
        assert_eq!(d.p2p_slot_bytes(1000), 2);
        assert_eq!(c.p2p_slot_bytes(2), 0);
        let odd = with(&[("FERROCX_SHM_COLL_P2P_BYTES", "100")]).unwrap();
        assert_eq!(odd.p2p_slot_bytes(2), 100);
        // Slots are whole cache lines, at least one.
        assert_eq!(
            with(&[("FERROCX_SHM_COLL_BYTES", "100")])
                .unwrap()
                .slot_bytes(2),
            Some(64)
        );
        assert_eq!(
            with(&[("FERROCX_SHM_COLL_BYTES", "63")])
                .unwrap()
                .slot_bytes(2),
            None
        );
        ferrocx_sdk::testing::assert_rejected(
            |env| Config::from_lookup(env),
            &[
                ("FERROCX_SHM_COLL_PRIORITY", "-1"),
                ("FERROCX_SHM_COLL_PRIORITY", "4294967296"),
                ("FERROCX_SHM_COLL_BYTES", "2M"),
                ("FERROCX_SHM_COLL_BYTES", "lots"),
                ("FERROCX_SHM_COLL_MAX_RANKS", "x"),
                ("FERROCX_SHM_COLL_MEMORY", "lots"),
                ("FERROCX_SHM_COLL_P2P_BYTES", "128K"),
                ("FERROCX_CHECK_CALLS", "maybe"),
            ],
        );
    }
}
