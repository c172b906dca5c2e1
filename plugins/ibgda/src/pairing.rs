//! Choosing each GPU's primary NIC port and its backup, from a [`Topology`].
//!
//! The rules (reference note 004, and what NVSHMEM's distance ranking does), all
//! deterministic — the same topology gives the same answer however it was built:
//!
//! 1. **Primary**: GPUs in index order each take the NIC with the fewest PCI hops
//!    from them; among equally close NICs, the one fewest GPUs already took, then
//!    the lowest slot. A NIC taken by several GPUs gives them its ports in turn
//!    (port 1, port 2, port 1, …), so two GPUs behind one dual-port NIC use one
//!    port each.
//! 2. **Backup**, in order of preference:
//!    * a dual-port NIC's **other port** (the note's "one card, two ports");
//!    * else the **adjacent NIC** by slot, even↔odd (0↔1, 2↔3, …; port 1) when
//!      that slot holds a NIC;
//!    * else (its partner slot is empty: a missing or odd NIC) the **closest
//!      other NIC** to the GPU (fewest hops, then lowest slot; port 1);
//!    * none when the host has a single single-port NIC.
//!
//! Pairing by slot rather than by position in the list of NICs found keeps the
//! pairs of the other NICs unchanged when one NIC is missing.
//!
//! The backup is chosen per GPU, so the whole host is paired at once; health is
//! then kept per (me, peer) path ([`crate::health`]), not per NIC.

mod topology;

#[cfg(test)]
mod tests;

pub use topology::{NicInfo, NodeId, PciDevice, Topology, TopologyError};

use std::collections::BTreeMap;
use std::fmt;

/// One port of one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRef {
    /// The NIC's slot.
    pub slot: u32,
    /// The port, from 1 (as verbs numbers them).
    pub port: u8,
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nic{}:{}", self.slot, self.port)
    }
}

/// Why the backup is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupRule {
    /// The other port of the primary's dual-port NIC.
    OtherPort,
    /// The even↔odd adjacent NIC.
    AdjacentNic,
    /// The adjacent slot is empty: the closest other NIC.
    ClosestOther,
}

/// The paths of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pairing {
    /// The GPU's index.
    pub gpu: u32,
    /// Where its traffic goes while healthy.
    pub primary: PortRef,
    /// PCI hops from the GPU to the primary NIC.
    pub primary_hops: u32,
    /// Where it goes when the primary path to a peer fails, and why there; `None`
    /// when the host has a single single-port NIC.
    pub backup: Option<(PortRef, BackupRule)>,
}

/// The host cannot be paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairingError {
    /// The topology has GPUs but no NIC.
    NoNics {
        /// How many GPUs were left without one.
        gpus: usize,
    },
}

impl fmt::Display for PairingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairingError::NoNics { gpus } => {
                write!(f, "{gpus} GPUs but no NIC: nothing to pair them with")
            }
        }
    }
}

impl std::error::Error for PairingError {}

/// The slot of each NIC named in `names` (the order the host lists them):
/// the number after the last `_` (`mlx5_3` → 3) when every name has one and
/// no two share it — so a missing NIC leaves the others' slots, and their
/// pairs, as they were — else the position in `names`.
pub fn nic_slots(names: &[&str]) -> Vec<u32> {
    let numbered: Option<Vec<u32>> = names
        .iter()
        .map(|n| n.rsplit_once('_').and_then(|(_, k)| k.parse().ok()))
        .collect();
    match numbered {
        Some(v) if v.iter().collect::<std::collections::BTreeSet<_>>().len() == v.len() => v,
        _ => (0..names.len() as u32).collect(),
    }
}

/// Pairs every GPU of `topo` with a primary port and a backup (rules above).
pub fn pair(topo: &Topology) -> Result<Vec<Pairing>, PairingError> {
    let gpus: Vec<(u32, NodeId)> = topo.gpus().collect();
    let nics: Vec<NicInfo> = topo.nics().collect();
    if nics.is_empty() {
        return if gpus.is_empty() {
            Ok(Vec::new())
        } else {
            Err(PairingError::NoNics { gpus: gpus.len() })
        };
    }
    let mut load: BTreeMap<u32, u32> = BTreeMap::new();
    let mut out = Vec::with_capacity(gpus.len());
    for (gpu, node) in gpus {
        let closest = |exclude: Option<u32>| {
            nics.iter()
                .filter(|n| Some(n.slot) != exclude)
                .min_by_key(|n| (topo.hops(node, n.node), n.slot))
                .copied()
        };
        let Some(nic) = nics
            .iter()
            .min_by_key(|n| {
                let taken = load.get(&n.slot).copied().unwrap_or(0);
                (topo.hops(node, n.node), taken, n.slot)
            })
            .copied()
        else {
            continue;
        };
        let taken = load.entry(nic.slot).or_insert(0);
        // Ports in turn; `ports` is 1 or 2 (checked when the NIC was added).
        let port = 1 + (*taken % u32::from(nic.ports)) as u8;
        *taken += 1;
        let primary = PortRef {
            slot: nic.slot,
            port,
        };
        let backup = if nic.ports == 2 {
            Some((
                PortRef {
                    slot: nic.slot,
                    port: 3 - port,
                },
                BackupRule::OtherPort,
            ))
        } else if let Some(adj) = topo.nic_in_slot(nic.slot ^ 1) {
            Some((
                PortRef {
                    slot: adj.slot,
                    port: 1,
                },
                BackupRule::AdjacentNic,
            ))
        } else {
            closest(Some(nic.slot)).map(|n| {
                (
                    PortRef {
                        slot: n.slot,
                        port: 1,
                    },
                    BackupRule::ClosestOther,
                )
            })
        };
        out.push(Pairing {
            gpu,
            primary,
            primary_hops: topo.hops(node, nic.node),
            backup,
        });
    }
    Ok(out)
}
