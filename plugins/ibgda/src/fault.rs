//! Fault injection: drop or delay the completions of a chosen path after N
//! requests (issue 20, item 4). A carrier asks [`FaultInjector::on_post`] for
//! each request it carries and obeys the answer; the fake carrier of the tests
//! does, and the real ones can wrap themselves in it for demos. The plans can
//! come from text ([`parse_plans`], the syntax of [`FAULT_ENV`]).

mod spec;

pub use spec::{parse_plans, FAULT_ENV};

use crate::health::{Path, PeerId};
use std::collections::BTreeMap;
use std::time::Duration;

/// What happens to an affected request's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Lost; the data itself still lands, as when an RDMA ACK is lost.
    Drop,
    /// Delivered this much later than it would have been.
    Delay(Duration),
}

/// One injected fault: the requests carried on `path` (to `peer`, or to every
/// peer), numbered from 0 per (peer, path), in `after .. after + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPlan {
    /// Only this peer, or every peer.
    pub peer: Option<PeerId>,
    /// The path.
    pub path: Path,
    /// Requests carried on the path before the fault starts.
    pub after: u64,
    /// How many requests it affects; `None`: every later one.
    pub count: Option<u64>,
    /// What happens to them.
    pub fault: Fault,
}

impl FaultPlan {
    fn hits(&self, peer: PeerId, path: Path, n: u64) -> bool {
        self.peer.is_none_or(|p| p == peer)
            && self.path == path
            && n >= self.after
            && self.count.is_none_or(|c| n - self.after < c)
    }
}

/// Counts requests per (peer, path) and says which plan, if any, hits each.
#[derive(Debug, Clone, Default)]
pub struct FaultInjector {
    plans: Vec<FaultPlan>,
    carried: BTreeMap<(PeerId, Path), u64>,
}

impl FaultInjector {
    /// An injector applying `plans` (the first that hits a request decides).
    pub fn new(plans: Vec<FaultPlan>) -> Self {
        FaultInjector {
            plans,
            carried: BTreeMap::new(),
        }
    }

    /// A request is being carried to `peer` on `path`: what happens to its
    /// completion (`None`: nothing, deliver it).
    pub fn on_post(&mut self, peer: PeerId, path: Path) -> Option<Fault> {
        let n = self.carried.entry((peer, path)).or_default();
        let this = *n;
        *n += 1;
        self.plans
            .iter()
            .find(|p| p.hits(peer, path, this))
            .map(|p| p.fault)
    }

    /// Requests carried so far to `peer` on `path`.
    pub fn carried(&self, peer: PeerId, path: Path) -> u64 {
        self.carried.get(&(peer, path)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_hits_exactly_its_window_of_its_path_and_peer() {
        let d = Duration::from_millis(2);
        let mut f = FaultInjector::new(vec![
            FaultPlan {
                peer: Some(PeerId(1)),
                path: Path::Primary,
                after: 3,
                count: Some(2),
                fault: Fault::Drop,
            },
            FaultPlan {
                peer: None,
                path: Path::Backup,
                after: 1,
                count: None,
                fault: Fault::Delay(d),
            },
        ]);
        let p1: Vec<_> = (0..7)
            .map(|_| f.on_post(PeerId(1), Path::Primary))
            .collect();
        assert_eq!(
            p1,
            [
                None,
                None,
                None,
                Some(Fault::Drop),
                Some(Fault::Drop),
                None,
                None
            ]
        );
        // Another peer's primary is counted apart and not hit.
        assert!((0..7).all(|_| f.on_post(PeerId(2), Path::Primary).is_none()));
        for peer in [PeerId(1), PeerId(2)] {
            assert_eq!(f.on_post(peer, Path::Backup), None);
            assert!((0..50).all(|_| f.on_post(peer, Path::Backup) == Some(Fault::Delay(d))));
        }
        assert_eq!(f.carried(PeerId(1), Path::Primary), 7);
        assert_eq!(f.carried(PeerId(2), Path::Backup), 51);
    }
}
