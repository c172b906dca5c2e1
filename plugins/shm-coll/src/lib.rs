//! # ferrocx-shm-coll — small host-memory collectives in the caller's thread
//!
//! A collective plugin (`ferrocx_collective_v1`, `sdk/include/ferrocx_collective.h`)
//! for the calls where a collective's cost is its fixed overhead: host
//! memory, every rank on one host, blocks of at most `FERROCX_SHM_COLL_MAX_BYTES`
//! (256 KiB by default, less above 4 ranks), moved through mailbox slots of
//! `FERROCX_SHM_COLL_BYTES` (64 KiB, less with many ranks:
//! `FERROCX_SHM_COLL_MEMORY`) in chunks where a block is larger. The core's path for such a call — a plan, the
//! engine, a transport's request per message — costs microseconds; here a
//! call is a few cache-line transfers (the approach of Open MPI's vader
//! "fast boxes" and of its shared-memory collectives).
//!
//! ## How a call runs
//!
//! Every rank owns one shared-memory region ([`layout`], [`arena`]) with
//! two mailbox slots per sender. A call ([`exchange`]) is one round: each rank
//! writes its block — and the call's fingerprint — straight into the region of
//! every rank it exchanges with, then polls its own region for theirs
//! ([`wait`]), checks each fingerprint against its own call (a mismatch fails
//! the call on every rank, naming both calls), and copies or reduces. With
//! the call check synchronous (the default) every pair exchanges in every
//! call; without it, or with it deferred (`FERROCX_CHECK_CALLS=deferred`),
//! messages go only where data does and a rank that receives nothing runs
//! ahead — deferred, it finds a peer's differing call at a later call
//! (`comm`); a
//! block larger than a slot takes one exchange per chunk. Its bid depends on
//! the call's shape alone (`FX_COLL_CAP_SHAPE_BIDS`: the core remembers it).
//! Reductions are one-shot, in rank order, so every rank computes the same
//! bits. No thread, lock, allocation or system call on the way; the core does
//! not run its own call check for this plugin (`FX_COLL_CAP_CHECKS_CALLS`).
//!
//! ## Failures
//!
//! Waits stop at `FERROCX_TIMEOUT` (the core turns it into a hang report),
//! when the core's abort flag rises (the communicator broke or was aborted, a
//! peer died or aborted: the core sets it for collective plugins), when a
//! peer's process is gone (the liveness lock on its region is free: this holds
//! across pid namespaces), or when a peer wrote into its region's header that
//! it gave up — whose reason, a mismatch for instance, is reported as is. A
//! failure breaks the plugin's comm; the core breaks the communicator.
//!
//! ## Environment
//!
//! See [`config`]: `FERROCX_SHM_COLL_PRIORITY` (150; 0 disables),
//! `FERROCX_SHM_COLL_MAX_BYTES` (256K), `FERROCX_SHM_COLL_BYTES` (64K),
//! `FERROCX_SHM_COLL_MEMORY` (16M), `FERROCX_SHM_COLL_P2P_BYTES` (64K),
//! `FERROCX_SHM_COLL_MAX_RANKS` (16); and
//! `FERROCX_COLLECTIVES=^shm-coll` leaves it out like any plugin.
//!
//! ## Tests
//!
//! The decisions are sans-IO and unit-tested: [`exchange`] runs every
//! collective at 1–5 ranks on threads, every root and in-place layout,
//! against directly computed results; [`setup`], [`layout`], [`wait`],
//! [`config`]. The real regions, processes and waits are exercised by the
//! workspace's multi-process tests (`tests/`), whose small collectives run
//! here.

pub mod arena;
pub mod comm;
pub mod config;
pub mod copy;
pub mod cpus;
pub mod exchange;
pub mod layout;
pub mod ring;
pub mod setup;
#[cfg(test)]
mod testkit;
pub mod wait;

use ferrocx_sdk::abi::{FX_COLL_CAP_CHECKS_CALLS, FX_COLL_CAP_HOST_MEM, FX_COLL_CAP_SHAPE_BIDS};
use ferrocx_sdk::collective::{CollDesc, Collective, CommInfo, Oob, P2pDesc};
use ferrocx_sdk::sweep::{sweep_stale, SHM_DIR};
use ferrocx_sdk::{Host, PluginResult};
use std::ffi::c_void;

ferrocx_sdk::register_builtin_collective!(ShmColl);

pub use comm::ShmComm;
pub use config::Config;

/// The plugin context.
pub struct ShmColl {
    host: Host,
    cfg: Config,
}

impl Collective for ShmColl {
    type Comm = ShmComm;
    type Window = ();
    const NAME: &'static str = "shm-coll";
    // The bid reads the block size, type and operator only (`ShmComm::can_run`).
    const CAPS: u64 = FX_COLL_CAP_HOST_MEM | FX_COLL_CAP_CHECKS_CALLS | FX_COLL_CAP_SHAPE_BIDS;

    fn init(host: Host) -> PluginResult<Self> {
        // Regions of processes that died before unlinking theirs.
        for name in sweep_stale(std::path::Path::new(SHM_DIR), &[comm::PREFIX]) {
            host.debug(format!("removed stale /dev/shm/{name}"));
        }
        Ok(ShmColl {
            host,
            cfg: Config::from_host(&host)?,
        })
    }

    fn comm_init(&self, info: &CommInfo, oob: Oob) -> PluginResult<ShmComm> {
        ShmComm::init(self.host, self.cfg, info, oob)
    }

    fn comm_destroy(&self, mut comm: ShmComm) -> PluginResult<()> {
        comm.close()
    }

    fn can_run(&self, comm: &ShmComm, coll: &CollDesc<'_, ()>) -> i32 {
        comm.can_run(coll)
    }

    fn describe(&self, comm: &ShmComm, coll: &CollDesc<'_, ()>) -> Option<String> {
        // One protocol: every pair exchanges through the mailboxes.
        (comm.can_run(coll) > 0).then(|| "mailboxes".into())
    }

    unsafe fn launch(
        &self,
        comm: &mut ShmComm,
        coll: &CollDesc<'_, ()>,
        _stream: *mut c_void,
    ) -> PluginResult<()> {
        // SAFETY: the same contract, passed on.
        unsafe { comm.launch(coll) }
    }

    fn p2p_can_run(&self, comm: &ShmComm, desc: &P2pDesc) -> i32 {
        comm.p2p_can_run(desc)
    }

    unsafe fn p2p_launch(
        &self,
        comm: &mut ShmComm,
        desc: &P2pDesc,
        _stream: *mut c_void,
    ) -> PluginResult<()> {
        // SAFETY: the same contract, passed on.
        unsafe { comm.p2p_launch(desc) }
    }

    fn status(&self, comm: &ShmComm) -> PluginResult<()> {
        comm.status()
    }
}
