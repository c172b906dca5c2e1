//! Where the NICs are: a sysfs scan of `class/infiniband`, PCI distances, and the choice
//! of a primary port and a backup port (reference note 004's pairing).
//!
//! Everything here reads files under a sysfs root given by the caller (`/sys` in
//! production, a directory built by the test in tests), so the choice is testable on
//! machines without RDMA hardware. Layout read (the kernel's):
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
use std::cmp::Ordering;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The chain of PCI components from the root complex down to a device, as named under
/// `/sys/devices` (e.g. `["pci0000:16", "0000:16:02.0", "0000:17:00.0"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPath(pub Vec<String>);

impl PciPath {
    /// From a resolved sysfs path such as `/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0`.
    pub fn from_sysfs(path: &Path) -> Option<Self> {
        let comps: Vec<String> = path
            .components()
            .filter_map(|c| c.as_os_str().to_str().map(str::to_owned))
            .skip_while(|c| !c.starts_with("pci"))
            .collect();
        (!comps.is_empty()).then_some(PciPath(comps))
    }

    /// The device's own bus id (last component).
    pub fn bus_id(&self) -> &str {
        self.0.last().map(String::as_str).unwrap_or("")
    }

    fn common(&self, other: &PciPath) -> usize {
        self.0
            .iter()
            .zip(&other.0)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

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

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// Native InfiniBand (LID routed).
    InfiniBand,
    /// RoCE (GID routed).
    Ethernet,
}

/// GID flavour from `gid_attrs/types`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// `IB/RoCE v1`.
    IbOrRoceV1,
    /// `RoCE v2`.
    RoceV2,
}

/// One non-zero GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Table index.
    pub index: u8,
    /// The GID.
    pub gid: [u8; 16],
    /// Its type.
    pub kind: GidKind,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (1-based).
    pub port: u8,
    /// Logical state is ACTIVE.
    pub active: bool,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Non-zero GIDs.
    pub gids: Vec<GidEntry>,
}

/// One RDMA device (a NIC, or one function of a multi-function NIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// Verbs device name (`mlx5_0`).
    pub name: String,
    /// Where it sits on PCI, when sysfs says.
    pub pci: Option<PciPath>,
    /// NUMA node (-1 unknown).
    pub numa: i32,
    /// Its ports, by number.
    pub ports: Vec<PortInfo>,
}

/// Compare device names with numbers compared as numbers (`mlx5_2` < `mlx5_10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn split(s: &str) -> (&str, Option<u64>) {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (head, tail.parse().ok())
    }
    let (ha, na) = split(a);
    let (hb, nb) = split(b);
    ha.cmp(hb).then(na.cmp(&nb)).then(a.cmp(b))
}

/// A sysfs tree (normally `/sys`).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, grp) in groups.iter().enumerate() {
        let v = u16::from_str_radix(grp, 16).ok()?;
        g[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(g)
}

impl Sysfs {
    /// A tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    /// The machine's `/sys`.
    pub fn system() -> Self {
        Self::new("/sys")
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every device under `class/infiniband`, in natural name order. No such directory
    /// (no RDMA driver loaded) is an empty list, not an error.
    pub fn scan(&self) -> io::Result<Vec<Nic>> {
        let dir = self.root.join("class/infiniband");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut nics = Vec::new();
        for e in entries {
            let e = e?;
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            nics.push(self.nic(&name));
        }
        nics.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        Ok(nics)
    }

    /// Read one device (missing files give defaults: no ports, unknown PCI/NUMA).
    pub fn nic(&self, name: &str) -> Nic {
        let dev = self.root.join("class/infiniband").join(name);
        let pci = fs::canonicalize(dev.join("device"))
            .ok()
            .and_then(|p| PciPath::from_sysfs(&p));
        let numa = read_trim(&dev.join("device/numa_node"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        let mut ports = Vec::new();
        if let Ok(rd) = fs::read_dir(dev.join("ports")) {
            for p in rd.flatten() {
                let Some(num) = p.file_name().to_str().and_then(|s| s.parse::<u8>().ok()) else {
                    continue;
                };
                ports.push(self.port(&p.path(), num));
            }
        }
        ports.sort_by_key(|p| p.port);
        Nic {
            name: name.to_owned(),
            pci,
            numa,
            ports,
        }
    }

    fn port(&self, dir: &Path, port: u8) -> PortInfo {
        // "4: ACTIVE"
        let active = read_trim(&dir.join("state")).is_some_and(|s| s.ends_with("ACTIVE"));
        let link_layer = match read_trim(&dir.join("link_layer")).as_deref() {
            Some("Ethernet") => LinkLayer::Ethernet,
            _ => LinkLayer::InfiniBand,
        };
        let lid = read_trim(&dir.join("lid"))
            .and_then(|s| u16::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0);
        let mut gids = Vec::new();
        if let Ok(rd) = fs::read_dir(dir.join("gids")) {
            for g in rd.flatten() {
                let Some(index) = g.file_name().to_str().and_then(|s| s.parse::<u8>().ok()) else {
                    continue;
                };
                let Some(gid) = read_trim(&g.path()).and_then(|s| parse_gid(&s)) else {
                    continue;
                };
                if gid == [0; 16] {
                    continue;
                }
                let kind = match read_trim(&dir.join(format!("gid_attrs/types/{index}"))) {
                    Some(t) if t.contains("v2") => GidKind::RoceV2,
                    _ => GidKind::IbOrRoceV1,
                };
                gids.push(GidEntry { index, gid, kind });
            }
        }
        gids.sort_by_key(|g| g.index);
        PortInfo {
            port,
            active,
            link_layer,
            lid,
            gids,
        }
    }

    /// PCI path and NUMA node of CUDA device `ordinal`, assuming CUDA's PCI bus order
    /// (`CUDA_DEVICE_ORDER=PCI_BUS_ID`) over every NVIDIA display/3D function and no
    /// `CUDA_VISIBLE_DEVICES` remapping. GPU support will replace this with the bus id
    /// that the CUDA driver reports.
    pub fn gpu(&self, ordinal: usize) -> Option<(PciPath, i32)> {
        let dir = self.root.join("bus/pci/devices");
        let mut gpus: Vec<String> = fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|bdf| {
                let d = dir.join(bdf);
                read_trim(&d.join("vendor")).as_deref() == Some("0x10de")
                    && read_trim(&d.join("class")).is_some_and(|c| c.starts_with("0x03"))
            })
            .collect();
        gpus.sort();
        let bdf = gpus.get(ordinal)?;
        let d = dir.join(bdf);
        let path = PciPath::from_sysfs(&fs::canonicalize(&d).ok()?)?;
        let numa = read_trim(&d.join("numa_node"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        Some((path, numa))
    }

    /// NUMA node of CPU `cpu` (the `node<M>` link in its sysfs directory).
    pub fn cpu_numa(&self, cpu: usize) -> Option<i32> {
        let dir = self.root.join(format!("devices/system/cpu/cpu{cpu}"));
        fs::read_dir(dir).ok()?.flatten().find_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<i32>()
                .ok()
        })
    }
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
