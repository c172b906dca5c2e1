//! Which NICs to use: PCI distances over the SDK's sysfs scan
//! ([`ferrocx_sdk::sysfs`], re-exported here), and the choice of a primary port and a
//! backup port (reference note 004's pairing).
//!
//! The scan reads files under a sysfs root given by the caller (`/sys` in production, a
//! directory built by the test in tests), so the choice is testable on machines without
//! RDMA hardware. Layout read (the kernel's):
//!
//! ```text
//! class/infiniband/<dev>/device            -> ../../../0000:17:00.0   (the NIC's PCI function)
//! class/infiniband/<dev>/device/numa_node
//! class/infiniband/<dev>/ports/<n>/state        "4: ACTIVE"
//! class/infiniband/<dev>/ports/<n>/link_layer   "InfiniBand" | "Ethernet"
//! class/infiniband/<dev>/ports/<n>/lid          "0x12"
//! class/infiniband/<dev>/ports/<n>/gids/<i>     "fe80:0000:…"
//! class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>  "RoCE v2" | "IB/RoCE v1"
//! bus/pci/devices/<bdf>/{vendor,class,numa_node}   (GPUs: vendor 0x10de, class 0x03xxxx)
//! devices/system/cpu/cpu<N>/node<M>                (the NUMA node of a CPU)
//! ```

use crate::config::HcaSpec;
pub use ferrocx_sdk::sysfs::{
    natural_cmp, GidEntry, GidKind, LinkLayer, Nic, PciPath, PortInfo, Sysfs,
};

/// How far a NIC is from the GPU or CPU that will use it, NCCL's classes from best to
/// worst. Compared as (class, hops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathClass {
    /// Below a common PCIe bridge or switch (NCCL's PIX/PXB).
    Bridge,
    /// Through the same PCIe host bridge (root complex): PHB.
    HostBridge,
    /// Different root complexes, same NUMA node (or NUMA unknown): NODE.
    Node,
    /// Across the CPU interconnect: SYS.
    System,
}

/// Distance of one NIC from the anchor: class first, then PCI hops within the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Distance {
    /// Coarse class.
    pub class: PathClass,
    /// PCI links between the two devices (0 when unknown).
    pub hops: usize,
}

/// What the NIC is chosen for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// A PCI device (a GPU): distance by PCI topology.
    Pci {
        /// Its PCI path.
        path: PciPath,
        /// Its NUMA node (-1 unknown).
        numa: i32,
    },
    /// Host memory used from a CPU on this NUMA node.
    Numa(i32),
    /// Nothing known: every NIC is as close as any other.
    Unknown,
}

/// Distance of `nic` from `anchor`.
pub fn distance(anchor: &Anchor, nic: &Nic) -> Distance {
    let numa_class = |a: i32, b: i32| {
        if a < 0 || b < 0 || a == b {
            PathClass::Node
        } else {
            PathClass::System
        }
    };
    match (anchor, &nic.pci) {
        (Anchor::Pci { path, numa }, Some(np)) => {
            let common = path.common(np);
            let hops = (path.0.len() - common) + (np.0.len() - common);
            let class = match common {
                0 => numa_class(*numa, nic.numa),
                1 => PathClass::HostBridge,
                _ => PathClass::Bridge,
            };
            Distance { class, hops }
        }
        (Anchor::Pci { numa, .. }, None) | (Anchor::Numa(numa), _) => Distance {
            class: numa_class(*numa, nic.numa),
            hops: 0,
        },
        (Anchor::Unknown, _) => Distance {
            class: PathClass::Node,
            hops: 0,
        },
    }
}

/// Reference note 004's pairing of single-port NICs: even ↔ odd (0↔1, 2↔3, …); for the
/// last NIC of an odd count, the one before it; `None` with fewer than two NICs.
pub fn adjacent(index: usize, total: usize) -> Option<usize> {
    if total < 2 || index >= total {
        return None;
    }
    let partner = if index.is_multiple_of(2) {
        index + 1
    } else {
        index - 1
    };
    if partner < total {
        Some(partner)
    } else {
        Some(index - 1)
    }
}

/// One chosen port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailChoice {
    /// Device name.
    pub dev: String,
    /// Port number.
    pub port: u8,
    /// Index of the device in the usable-NIC list.
    pub nic: usize,
    /// Its distance from the anchor.
    pub distance: Distance,
}

impl std::fmt::Display for RailChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.dev, self.port)
    }
}

/// Why the backup is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupKind {
    /// Another port of the primary's NIC (dual-port cards).
    SameNicPort,
    /// The adjacent NIC (even ↔ odd).
    AdjacentNic,
    /// The adjacent NIC has no usable port: the closest other NIC.
    OtherNic,
}

/// Primary and backup ports for one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Where traffic goes while the path is healthy.
    pub primary: RailChoice,
    /// Where it goes when the primary path fails (none: single port, or backup disabled).
    pub backup: Option<(RailChoice, BackupKind)>,
}

/// The usable NICs: those with at least one ACTIVE port that `spec` allows, keeping only
/// such ports, in natural name order.
pub fn usable(nics: &[Nic], spec: Option<&HcaSpec>) -> Vec<Nic> {
    let mut out: Vec<Nic> = nics
        .iter()
        .map(|n| {
            let mut n = n.clone();
            n.ports
                .retain(|p| p.active && spec.is_none_or(|s| s.allows(&n.name, p.port)));
            n
        })
        .filter(|n| !n.ports.is_empty())
        .collect();
    out.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    out
}

/// Choose the primary port (closest usable NIC to `anchor`; ties broken by the user's
/// `FERROCX_IB_HCA` order, then spread over local ranks) and its backup (another port
/// of the same NIC, else the adjacent NIC, else the closest other NIC). `nics` must be
/// the output of [`usable`].
pub fn choose(
    nics: &[Nic],
    spec: Option<&HcaSpec>,
    anchor: &Anchor,
    local_rank: usize,
    want_backup: bool,
) -> Option<Choice> {
    if nics.is_empty() {
        return None;
    }
    let dist: Vec<Distance> = nics.iter().map(|n| distance(anchor, n)).collect();
    let best = *dist.iter().min()?;
    let mut ties: Vec<usize> = (0..nics.len()).filter(|&i| dist[i] == best).collect();
    let hca_rank = |i: usize| {
        spec.and_then(|s| s.rank(&nics[i].name, nics[i].ports[0].port))
            .unwrap_or(usize::MAX)
    };
    let top = ties
        .iter()
        .map(|&i| hca_rank(i))
        .min()
        .unwrap_or(usize::MAX);
    ties.retain(|&i| hca_rank(i) == top);
    let p = ties[local_rank % ties.len()];
    let rail = |i: usize, port: u8| RailChoice {
        dev: nics[i].name.clone(),
        port,
        nic: i,
        distance: dist[i],
    };
    let primary = rail(p, nics[p].ports[0].port);
    if !want_backup {
        return Some(Choice {
            primary,
            backup: None,
        });
    }
    let backup = match nics[p].ports.get(1) {
        Some(second) => Some((rail(p, second.port), BackupKind::SameNicPort)),
        None => adjacent(p, nics.len())
            .map(|a| (rail(a, nics[a].ports[0].port), BackupKind::AdjacentNic)),
    };
    // `usable` guarantees every listed NIC has a port, so the adjacent NIC always
    // qualifies; OtherNic remains for callers that pass unfiltered lists.
    let backup = backup.or_else(|| {
        (0..nics.len())
            .filter(|&i| i != p && !nics[i].ports.is_empty())
            .min_by_key(|&i| dist[i])
            .map(|i| (rail(i, nics[i].ports[0].port), BackupKind::OtherNic))
    });
    Some(Choice { primary, backup })
}

/// Pick the GID index for a port: the user's index when given (it must exist), else on
/// RoCE a RoCE v2 IPv4-mapped GID, then any RoCE v2 GID that is not link-local, then
/// any RoCE v2, then the lowest index; on InfiniBand the lowest index (GID 0).
pub fn choose_gid(port: &PortInfo, forced: Option<u8>) -> Option<&GidEntry> {
    if let Some(i) = forced {
        return port.gids.iter().find(|g| g.index == i);
    }
    if port.link_layer == LinkLayer::InfiniBand {
        return port.gids.first();
    }
    let v4_mapped = |g: &GidEntry| g.gid[..10] == [0; 10] && g.gid[10..12] == [0xff, 0xff];
    let link_local = |g: &GidEntry| g.gid[0] == 0xfe && g.gid[1] & 0xc0 == 0x80;
    let v2 = |g: &&GidEntry| g.kind == GidKind::RoceV2;
    port.gids
        .iter()
        .filter(v2)
        .find(|g| v4_mapped(g))
        .or_else(|| port.gids.iter().filter(v2).find(|g| !link_local(g)))
        .or_else(|| port.gids.iter().find(v2))
        .or_else(|| port.gids.first())
}

#[cfg(test)]
mod tests;
