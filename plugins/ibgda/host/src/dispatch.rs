//! Which carrier serves which peer: ranks of this host go through the
//! copy-engine carrier ([`SameHost`]), ranks of other hosts through the TCP
//! carrier ([`NetCarrier`]); `FERROCX_IBGDA_CARRIER=net` sends every peer
//! through TCP (to test it on one host). One [`Carrier`] for the proxy over
//! both.

use crate::carrier::{HostCarrier, Outcome, SameHost, Windows};
use crate::config::Config;
use crate::mapped::Signals;
use crate::net::{self, NetCarrier};
use ferrocx_ibgda::fault::FaultInjector;
use ferrocx_ibgda::health::{Nanos, Path, PeerId};
use ferrocx_ibgda::proxy::{Carrier, CarrierRequest, Refused};
use ferrocx_ibgda::queue::WorkRecord;
use ferrocx_sdk::collective::{CommInfo, Oob};
use ferrocx_sdk::device::Device;
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::Arc;
use std::time::Duration;

/// How long `comm_init` waits for the TCP carrier's connections.
pub const NET_SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How a rank is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This rank itself (no queue goes there).
    Me,
    /// Copy engines of this host.
    SameHost,
    /// TCP.
    Net,
}

/// Per-peer routes, from `comm_init`'s knowledge: rank `me`, each rank's
/// host, and whether the net carrier is forced for every peer.
pub fn routes(me: usize, host_hashes: &[u64], force_net: bool) -> Vec<Route> {
    host_hashes
        .iter()
        .enumerate()
        .map(|(r, h)| {
            if r == me {
                Route::Me
            } else if force_net || *h != host_hashes[me] {
                Route::Net
            } else {
                Route::SameHost
            }
        })
        .collect()
}

/// The peers (by rank) `routes` sends through `route`, for messages.
pub fn ranks_of(routes: &[Route], route: Route) -> Vec<usize> {
    (0..routes.len()).filter(|&r| routes[r] == route).collect()
}

/// The carriers of rank `info.rank` for `routes` (collective: the TCP
/// carrier connects every pair it serves, on every rank, when any route is
/// [`Route::Net`]), and a line saying which serves which peers.
#[allow(clippy::too_many_arguments)]
pub fn build(
    info: &CommInfo,
    cfg: &Config,
    oob: &Oob,
    device: &dyn Device,
    routes: &[Route],
    windows: Windows,
    signals: Vec<Option<Arc<Signals>>>,
    own: Arc<Signals>,
) -> PluginResult<(Dispatch, String)> {
    let rank = info.rank;
    let pids = info.peers.iter().map(|p| p.pid).collect();
    let same = SameHost::new(
        [device.queue()?, device.queue()?],
        windows.clone(),
        signals,
        pids,
        FaultInjector::new(cfg.faults.clone()),
    );
    let mut lines = Vec::new();
    let same_ranks = ranks_of(routes, Route::SameHost);
    if !same_ranks.is_empty() {
        lines.push(format!(
            "ranks {same_ranks:?} of this host through copy engines (two streams of this GPU are the primary and backup paths; signals and fetch-adds are host atomics on the peer's signal words)"
        ));
    }
    let net_ranks = ranks_of(routes, Route::Net);
    // Every rank or none has a peer over TCP (hosts differ for some pair, or
    // the knob, agreed in comm_init, forces it), so all take part or none.
    let net = if net_ranks.is_empty() {
        None
    } else {
        let chosen = net::rails::choose(cfg.net_ifs.as_ref());
        let names = chosen.as_ref().map(|c| c.1.clone()).ok();
        let is_net: Vec<bool> = routes.iter().map(|r| *r == Route::Net).collect();
        let links = net::setup::connect(
            oob,
            rank,
            &is_net,
            info.comm_hash,
            chosen.map(|c| c.0),
            NET_SETUP_TIMEOUT,
        )
        .map_err(|e| PluginError::system(format!("ibgda net carrier: {e}")))?;
        let names = names.unwrap_or_default();
        let why = if cfg.force_net {
            "FERROCX_IBGDA_CARRIER=net"
        } else {
            "on other hosts"
        };
        lines.push(format!(
            "ranks {net_ranks:?} ({why}) over TCP (primary path {} on {}, backup path {} on {}; the receiving rank writes the bytes into its window and applies signals and fetch-adds once, then acknowledges; the higher rank of a pair dials a broken connection again)",
            links.local[0],
            names[0],
            links.local[1],
            names[1]
        ));
        let queues = [
            [device.queue()?, device.queue()?],
            [device.queue()?, device.queue()?],
        ];
        Some(NetCarrier::new(
            rank,
            links,
            queues,
            windows,
            own,
            FaultInjector::new(cfg.faults.clone()),
            4 * cfg.health.timeout,
        ))
    };
    if lines.is_empty() {
        lines.push("no peers".into());
    }
    Ok((
        Dispatch::new(routes.to_vec(), same, net),
        format!("carriers: {}", lines.join("; ")),
    ))
}

/// The carriers of one rank and each peer's.
pub struct Dispatch {
    routes: Vec<Route>,
    same: SameHost,
    net: Option<NetCarrier>,
}

impl Dispatch {
    /// Peers go where `routes` says; `net` must be there if any route is
    /// [`Route::Net`].
    pub fn new(routes: Vec<Route>, same: SameHost, net: Option<NetCarrier>) -> Dispatch {
        Dispatch { routes, same, net }
    }

    fn route(&self, peer: PeerId) -> Route {
        self.routes
            .get(peer.0 as usize)
            .copied()
            .unwrap_or(Route::Me)
    }
}

impl Carrier for Dispatch {
    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused> {
        match (self.route(peer), self.net.as_mut()) {
            (Route::SameHost, _) => self.same.post(peer, path, req),
            (Route::Net, Some(n)) => n.post(peer, path, req),
            _ => Err(Refused {
                status: crate::net::carrier::STATUS_CONN_BROKEN,
            }),
        }
    }

    fn check(&self, peer: PeerId, work: &WorkRecord) -> Result<(), String> {
        match (self.route(peer), self.net.as_ref()) {
            (Route::SameHost, _) => self.same.check(peer, work),
            (Route::Net, Some(n)) => n.check(peer, work),
            (Route::Net, None) => Err(format!("rank {} has no net carrier", peer.0)),
            (Route::Me, _) => Err(format!("{peer} is not a peer of this rank")),
        }
    }
}

impl HostCarrier for Dispatch {
    fn progress(&mut self, now: Nanos, out: &mut Vec<Outcome>) -> usize {
        let mut n = self.same.progress(now, out);
        if let Some(net) = self.net.as_mut() {
            n += net.progress(now, out);
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.same.in_flight() + self.net.as_ref().map_or(0, |n| n.in_flight())
    }

    fn next_due(&self) -> Option<Nanos> {
        [
            self.same.next_due(),
            self.net.as_ref().and_then(|n| n.next_due()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn take_note(&mut self) -> Option<String> {
        self.net.as_mut().and_then(|n| n.take_note())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_of_other_hosts_go_over_the_net_and_the_knob_sends_everyone() {
        let hosts = [7, 7, 9, 7, 9];
        use Route::*;
        assert_eq!(routes(1, &hosts, false), [SameHost, Me, Net, SameHost, Net]);
        assert_eq!(routes(2, &hosts, false), [Net, Net, Me, Net, SameHost]);
        assert_eq!(routes(1, &hosts, true), [Net, Me, Net, Net, Net]);
        assert_eq!(ranks_of(&routes(1, &hosts, false), Net), [2, 4]);
        assert_eq!(routes(0, &[3], false), [Me]);
    }
}
