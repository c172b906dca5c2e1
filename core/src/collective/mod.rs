//! Collective plugins: the second half of the plugin architecture. A
//! collective plugin (`ferrocx_collective_v1`, `sdk/include/ferrocx_collective.h`)
//! runs whole collectives itself; for every call the core asks each one's
//! `can_run` and runs the call on the highest bidder, or on its own algorithms
//! ([`select`]). `FERROCX_COLLECTIVES` steers which plugins take part.
//!
//! Layers: [`library`] validates tables, [`instance`] holds one plugin's
//! context and comm, `oob` gives plugins the bootstrap's collectives for
//! setup, and [`Collectives`] is a communicator's set of them.

pub mod bids;
pub mod instance;
pub mod library;
mod oob;
pub mod select;
pub(crate) mod start;

pub use instance::CollectivePlugin;
pub use library::CollectiveLib;
pub(crate) use oob::OobTable;
pub use select::{Choice, Runner};

use crate::algo::CollKind;
use crate::error::{Error, Result};
use crate::plugin::NameFilter;
use crate::shared::CommShared;
use ferrocx_sdk::abi::*;
use instance::Started;
use std::sync::Arc;

/// The ABI number of a collective plugins may run (`None`: only the core runs it).
pub fn abi_coll(kind: CollKind) -> Option<i32> {
    Some(match kind {
        CollKind::Broadcast => FX_COLL_BROADCAST,
        CollKind::Reduce => FX_COLL_REDUCE,
        CollKind::AllGather => FX_COLL_ALL_GATHER,
        CollKind::ReduceScatter => FX_COLL_REDUCE_SCATTER,
        CollKind::AllReduce => FX_COLL_ALL_REDUCE,
        CollKind::AllToAll => FX_COLL_ALL_TO_ALL,
        CollKind::Gather => FX_COLL_GATHER,
        CollKind::Scatter => FX_COLL_SCATTER,
        CollKind::AllToAllV | CollKind::Barrier => return None,
    })
}

/// `FERROCX_COLLECTIVES` from the environment.
pub fn filter_from_env() -> Result<NameFilter> {
    NameFilter::parse_var(
        "FERROCX_COLLECTIVES",
        &std::env::var("FERROCX_COLLECTIVES").unwrap_or_default(),
    )
}

/// A communicator's collective plugins, in discovery order (the same on every rank).
#[derive(Default)]
pub struct Collectives {
    plugins: Vec<CollectivePlugin>,
    /// [`host_bids_by_shape`](Self::host_bids_by_shape), decided once.
    shape_bids: bool,
    /// Whether a plugin serves device memory: only those are asked for
    /// asynchronous failures ([`status`](Self::status), before every call).
    any_device: bool,
}

impl Collectives {
    /// Start every allowed plugin on this communicator. Collective: every rank
    /// starts the same list in the same order; a plugin that cannot serve this
    /// communicator on some rank (`comm_init` unsupported, or failed when not
    /// named explicitly) is dropped on every rank, so all ranks choose alike.
    /// Returns the set and, per plugin, why it was left out.
    pub(crate) fn start(
        libs: &[Arc<CollectiveLib>],
        filter: &NameFilter,
        shared: &Arc<CommShared>,
    ) -> Result<(Collectives, Vec<(String, String)>)> {
        let mut left_out = Vec::new();
        let mut started: Vec<Option<CollectivePlugin>> = Vec::new();
        for lib in libs.iter().filter(|l| filter.allows(&l.name)) {
            let required = filter.required().contains(&lib.name);
            match CollectivePlugin::start(lib.clone(), shared) {
                Ok(Started::Ready(p)) => started.push(Some(p)),
                Ok(Started::Unsupported(why)) => {
                    tracing::info!(target: "ferrocx::collective", "collective plugin '{}' sits this communicator out: {why}", lib.name);
                    left_out.push((
                        lib.name.clone(),
                        format!("not for this communicator: {why}"),
                    ));
                    started.push(None);
                }
                Err(e) if required => return Err(e),
                Err(e) => {
                    tracing::warn!(target: "ferrocx::collective", "skipping collective plugin '{}': {e}", lib.name);
                    left_out.push((lib.name.clone(), format!("start failed: {e}")));
                    started.push(None);
                }
            }
        }
        if started.is_empty() {
            return Ok((Collectives::default(), left_out));
        }
        // Keep a plugin only where every rank has it.
        let mine: Vec<u8> = started.iter().map(|p| p.is_some() as u8).collect();
        let all = shared.bootstrap.all_gather(&mine)?;
        let mut plugins = Vec::new();
        for (i, p) in started.into_iter().enumerate() {
            let missing: Vec<usize> = all
                .iter()
                .enumerate()
                .filter(|(_, v)| v.get(i) != Some(&1))
                .map(|(r, _)| r)
                .collect();
            match p {
                Some(p) if missing.is_empty() => plugins.push(p),
                Some(p) => {
                    let why = format!("not running on rank(s) {missing:?}");
                    tracing::info!(target: "ferrocx::collective", "collective plugin '{}' left out: {why}", p.name());
                    left_out.push((p.name().to_string(), why));
                }
                None => {}
            }
        }
        let shape_bids = plugins
            .iter()
            .all(|p| !p.serves(FX_MEM_HOST) || p.bids_by_shape());
        let any_device = plugins.iter().any(|p| p.serves(FX_MEM_CUDA));
        Ok((
            Collectives {
                plugins,
                shape_bids,
                any_device,
            },
            left_out,
        ))
    }

    /// No plugin takes part: every call runs on the core.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[CollectivePlugin] {
        &self.plugins
    }

    /// Whether every plugin that takes host memory bids on a host call's shape
    /// alone (`FX_COLL_CAP_SHAPE_BIDS`): its winner may be remembered per shape.
    pub fn host_bids_by_shape(&self) -> bool {
        self.shape_bids
    }

    /// Ask every plugin about `desc` and decide.
    pub fn choose(&self, desc: &FxCollDesc) -> Choice {
        let scores: Vec<(String, i32)> = self
            .plugins
            .iter()
            .map(|p| (p.name().to_string(), p.can_run(desc)))
            .collect();
        Choice::decide(&scores)
    }

    /// Destroy every plugin's comm (see [`CollectivePlugin::close`]): their
    /// errors.
    pub fn close(&self) -> Vec<Error> {
        self.plugins
            .iter()
            .filter_map(|p| p.close().err())
            .collect()
    }

    /// The first asynchronous error a plugin reports.
    #[inline]
    pub fn status(&self) -> Result<()> {
        if !self.any_device {
            return Ok(());
        }
        self.device_status()
    }

    /// [`status`](Self::status) with a plugin that serves device memory
    /// (out of line: host-only communicators never call it).
    #[inline(never)]
    fn device_status(&self) -> Result<()> {
        self.plugins.iter().try_for_each(|p| p.status())
    }

    /// The plugin a choice named.
    pub fn get(&self, i: usize) -> Result<&CollectivePlugin> {
        self.plugins
            .get(i)
            .ok_or_else(|| Error::invalid(format!("no collective plugin #{i}")))
    }
}
