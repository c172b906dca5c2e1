//! Transport selection, all of it: `FERROCX_TRANSPORTS` ([`TransportFilter`]),
//! the per-peer choice on the sending side (highest non-zero `can_connect`
//! wins, ties broken by a fixed order, NCCL's: [`choose`]), logged with
//! every candidate's score, and the receiving side's check that it can follow
//! the sender's choice ([`Candidates::follow`]).

use super::instance::PluginInstance;
use crate::error::{Error, Result};
use ferrocx_sdk::abi::FxPeerInfo;
use std::sync::Arc;

/// Tie-break order for equal scores; unknown names come after, alphabetically.
pub const TIE_ORDER: [&str; 4] = ["p2p", "shm", "net-ib", "net-socket"];

/// Parsed `FERROCX_TRANSPORTS`.
pub type TransportFilter = NameFilter;

/// A list of plugin names from the environment: `a,b` (only these, in this
/// order) or `^a,b` (all but these). `FERROCX_TRANSPORTS` and `FERROCX_COLLECTIVES`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NameFilter {
    /// Every loaded plugin, in tie order.
    #[default]
    All,
    /// Only these, and this list is the tie order.
    Only(Vec<String>),
    /// Everything but these.
    Exclude(Vec<String>),
}

impl NameFilter {
    /// Parse `FERROCX_TRANSPORTS`: `a,b` (restrict and order) or `^a,b` (exclude).
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_var("FERROCX_TRANSPORTS", text)
    }

    /// Parse the value of `var`.
    pub fn parse_var(var: &str, text: &str) -> Result<Self> {
        let t = text.trim();
        if t.is_empty() {
            return Ok(NameFilter::All);
        }
        let (exclude, body) = match t.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let names: Vec<String> = body
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if names.is_empty() || names.iter().any(|n| n.starts_with('^')) {
            return Err(Error::Config {
                var: var.into(),
                message: format!("'{text}': expected a,b (use only these, in this order) or ^a,b (exclude these)"),
            });
        }
        Ok(if exclude {
            NameFilter::Exclude(names)
        } else {
            NameFilter::Only(names)
        })
    }

    /// From the environment.
    pub fn from_env() -> Result<Self> {
        Self::parse(&std::env::var("FERROCX_TRANSPORTS").unwrap_or_default())
    }

    /// Whether a plugin of this name may be used.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            NameFilter::All => true,
            NameFilter::Only(n) => n.iter().any(|x| x == name),
            NameFilter::Exclude(n) => !n.iter().any(|x| x == name),
        }
    }

    /// Names the user asked for explicitly (must exist).
    pub fn required(&self) -> &[String] {
        match self {
            NameFilter::Only(n) => n,
            _ => &[],
        }
    }

    /// Position of `name` in the tie-break order.
    pub fn rank_of(&self, name: &str) -> (usize, String) {
        match self {
            NameFilter::Only(n) => (
                n.iter().position(|x| x == name).unwrap_or(usize::MAX),
                name.to_string(),
            ),
            _ => (
                TIE_ORDER
                    .iter()
                    .position(|x| *x == name)
                    .unwrap_or(TIE_ORDER.len()),
                name.to_string(),
            ),
        }
    }
}

/// Pick from `(name, score)` candidates and return the index into `candidates`.
///
/// By default the highest score > 0 wins, ties broken by [`TIE_ORDER`]. With an
/// explicit list (`FERROCX_TRANSPORTS=a,b`) the user's order is the priority:
/// the first listed plugin that can connect wins, whatever the scores.
pub fn choose(filter: &TransportFilter, candidates: &[(String, i32)]) -> Option<usize> {
    let usable = candidates
        .iter()
        .enumerate()
        .filter(|(_, (n, s))| *s > 0 && filter.allows(n));
    match filter {
        NameFilter::Only(_) => usable.min_by_key(|(_, (n, s))| (filter.rank_of(n), -s)),
        _ => usable.min_by(|(_, (na, sa)), (_, (nb, sb))| {
            sb.cmp(sa)
                .then_with(|| filter.rank_of(na).cmp(&filter.rank_of(nb)))
        }),
    }
    .map(|(i, _)| i)
}

/// For a connection that carries host memory only: when a transport that
/// moves host memory itself can reach the peer (score > 0, allowed by the
/// filter), the device transports (`device(i)`: p2p, whose host path goes
/// through a device FIFO) drop out; otherwise nothing changes.
pub fn prefer_host_transports(
    filter: &TransportFilter,
    scores: &mut [(String, i32)],
    device: impl Fn(usize) -> bool,
) {
    let host_reaches =
        (0..scores.len()).any(|i| !device(i) && scores[i].1 > 0 && filter.allows(&scores[i].0));
    if host_reaches {
        for (i, s) in scores.iter_mut().enumerate() {
            if device(i) {
                s.1 = 0;
            }
        }
    }
}

/// What choosing a transport between this rank and a peer looks at.
pub struct Candidates<'a> {
    /// This rank.
    pub me: usize,
    /// Every rank's record.
    pub infos: &'a [FxPeerInfo],
    /// The initialized plugins, in discovery order.
    pub plugins: &'a [Arc<PluginInstance>],
    /// `FERROCX_TRANSPORTS`.
    pub filter: &'a TransportFilter,
    /// Plugins skipped at discovery (for messages).
    pub skipped: &'a str,
}

impl Candidates<'_> {
    /// The sending side's choice for this rank → `peer`, logged at info with
    /// every candidate's score.
    pub fn choose(&self, peer: usize) -> Result<Arc<PluginInstance>> {
        self.choose_for(peer, false)
    }

    /// [`choose`](Self::choose) for connections that carry host memory only
    /// (`host_memory`): to a peer on this host, a transport that moves host
    /// memory itself (shm, not p2p's device FIFO) wins over device transports
    /// when one can reach the peer and the filter allows it. Across hosts the
    /// choice stays (a network transport that also takes device memory moves
    /// host memory as well).
    pub fn choose_for(&self, peer: usize, host_memory: bool) -> Result<Arc<PluginInstance>> {
        let (me, them) = (&self.infos[self.me], &self.infos[peer]);
        let mut scores: Vec<(String, i32)> = self
            .plugins
            .iter()
            .map(|p| (p.name().to_string(), p.can_connect(me, them)))
            .collect();
        if host_memory && me.host_hash == them.host_hash {
            prefer_host_transports(self.filter, &mut scores, |i| {
                self.plugins[i].takes_device_memory()
            });
        }
        let shown = scores
            .iter()
            .map(|(n, s)| format!("{n}={s}"))
            .collect::<Vec<_>>()
            .join(", ");
        match choose(self.filter, &scores) {
            Some(i) => {
                let what = if host_memory { " for host memory" } else { "" };
                tracing::info!(target: "ferrocx::select", "rank {} -> rank {peer}{what}: transport {} (scores: {shown})", self.me, scores[i].0);
                Ok(self.plugins[i].clone())
            }
            None => Err(Error::NoTransport {
                peer,
                detail: format!(
                    "scores: [{}], FERROCX_TRANSPORTS filter: {:?}, skipped plugins: {}",
                    if shown.is_empty() {
                        "no plugins loaded".into()
                    } else {
                        shown
                    },
                    self.filter,
                    self.skipped
                ),
            }),
        }
    }

    /// The receiving side of the sender's choice `name`: the plugin must be
    /// loaded, allowed, and able to reach `peer` from here.
    pub fn follow(&self, peer: usize, name: &str) -> Result<Arc<PluginInstance>> {
        let me = self.me;
        let found = self.plugins.iter().find(|p| p.name() == name).cloned();
        let plugin = match found {
            Some(p) if self.filter.allows(name) => p,
            _ => {
                let loaded = self
                    .plugins
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Error::NoTransport {
                    peer,
                    detail: format!(
                        "rank {peer} chose transport '{name}' to send to rank {me}, but it is not available here (loaded: {loaded}; FERROCX_TRANSPORTS filter {:?})",
                        self.filter
                    ),
                });
            }
        };
        if plugin.can_connect(&self.infos[me], &self.infos[peer]) == 0 {
            return Err(Error::NoTransport {
                peer,
                detail: format!("rank {peer} chose transport '{name}' to send to rank {me}, but '{name}' on rank {me} cannot reach rank {peer} (can_connect = 0)"),
            });
        }
        Ok(plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: &[(&str, i32)]) -> Vec<(String, i32)> {
        v.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn parse_forms() {
        assert_eq!(TransportFilter::parse("").unwrap(), NameFilter::All);
        assert_eq!(
            TransportFilter::parse("shm, net-socket").unwrap(),
            NameFilter::Only(vec!["shm".into(), "net-socket".into()])
        );
        assert_eq!(
            TransportFilter::parse("^p2p").unwrap(),
            NameFilter::Exclude(vec!["p2p".into()])
        );
        let e = TransportFilter::parse("^").unwrap_err().to_string();
        assert!(e.contains("FERROCX_TRANSPORTS"), "{e}");
        assert!(TransportFilter::parse("a,^b").is_err());
    }

    #[test]
    fn host_memory_prefers_a_host_transport_that_reaches() {
        let all = NameFilter::All;
        let device = |i: usize| i == 0; // p2p first
        let mut s = c(&[("p2p", 200), ("shm", 100), ("net-socket", 10)]);
        prefer_host_transports(&all, &mut s, device);
        assert_eq!(choose(&all, &s), Some(1), "shm for host memory");
        // No host transport reaches (or the filter leaves none): p2p stays.
        let mut s = c(&[("p2p", 200), ("shm", 0)]);
        prefer_host_transports(&all, &mut s, device);
        assert_eq!(choose(&all, &s), Some(0));
        let only_p2p = TransportFilter::parse("p2p").unwrap();
        let mut s = c(&[("p2p", 200), ("shm", 100)]);
        prefer_host_transports(&only_p2p, &mut s, device);
        assert_eq!(choose(&only_p2p, &s), Some(0));
    }

    #[test]
    fn highest_score_then_fixed_order() {
        let all = NameFilter::All;
        assert_eq!(choose(&all, &c(&[("c-pipe", 10), ("shm", 100)])), Some(1));
        assert_eq!(
            choose(&all, &c(&[("net-socket", 5), ("shm", 5), ("p2p", 5)])),
            Some(2)
        );
        assert_eq!(choose(&all, &c(&[("zz", 5), ("aa", 5)])), Some(1));
        assert_eq!(choose(&all, &c(&[("shm", 0)])), None);
        let only = TransportFilter::parse("c-pipe,shm").unwrap();
        assert_eq!(choose(&only, &c(&[("shm", 7), ("c-pipe", 7)])), Some(1));
        assert_eq!(choose(&only, &c(&[("shm", 100), ("c-pipe", 10)])), Some(1));
        assert_eq!(choose(&only, &c(&[("shm", 100), ("c-pipe", 0)])), Some(0));
        assert_eq!(choose(&only, &c(&[("shm", 100), ("other", 500)])), Some(0));
        let ex = TransportFilter::parse("^shm").unwrap();
        assert_eq!(choose(&ex, &c(&[("shm", 100), ("c-pipe", 10)])), Some(1));
    }
}
