//! Where devices sit, read from a sysfs tree: the RDMA NICs under
//! `class/infiniband` (ports, link layers, GIDs), PCI paths from the root
//! complex down to a device, GPUs by bus id, CPUs' NUMA nodes. Every read
//! goes through a root given by the caller (`/sys` in production, a
//! directory a test builds), so callers stay testable without the hardware.
//! net-ib chooses its rails from it; ibgda pairs GPUs with NICs from it.
//!
//! Layout read (the kernel's):
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

    /// How many leading components `self` and `other` share.
    pub fn common(&self, other: &PciPath) -> usize {
        self.0
            .iter()
            .zip(&other.0)
            .take_while(|(a, b)| a == b)
            .count()
    }
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

/// One PCI function as sysfs places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Its bus id (`0000:17:00.0`).
    pub bdf: String,
    /// Its path from the root complex.
    pub path: PciPath,
    /// Its NUMA node (-1 unknown).
    pub numa: i32,
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

    /// Every GPU on the host (NVIDIA display/3D functions under
    /// `bus/pci/devices`), in bus-id order — the order of CUDA's
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` and nvidia-smi's indices, whatever
    /// `CUDA_VISIBLE_DEVICES` hides from this process.
    pub fn gpus(&self) -> Vec<PciFunction> {
        self.gpu_bus_ids()
            .iter()
            .filter_map(|b| self.pci_function(b))
            .collect()
    }

    /// The bus ids of every GPU, in bus-id order.
    fn gpu_bus_ids(&self) -> Vec<String> {
        let dir = self.root.join("bus/pci/devices");
        let Ok(rd) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut bdfs: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|bdf| {
                let d = dir.join(bdf);
                read_trim(&d.join("vendor")).as_deref() == Some("0x10de")
                    && read_trim(&d.join("class")).is_some_and(|c| c.starts_with("0x03"))
            })
            .collect();
        bdfs.sort();
        bdfs
    }

    /// The PCI function with bus id `bdf` (`0000:17:00.0`): its path from
    /// the root complex and its NUMA node.
    pub fn pci_function(&self, bdf: &str) -> Option<PciFunction> {
        let d = self.root.join("bus/pci/devices").join(bdf);
        let path = PciPath::from_sysfs(&fs::canonicalize(&d).ok()?)?;
        let numa = read_trim(&d.join("numa_node"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        Some(PciFunction {
            bdf: bdf.to_owned(),
            path,
            numa,
        })
    }

    /// PCI path and NUMA node of CUDA device `ordinal`, assuming CUDA's PCI
    /// bus order over every GPU ([`gpus`](Self::gpus)) and no
    /// `CUDA_VISIBLE_DEVICES` remapping.
    pub fn gpu(&self, ordinal: usize) -> Option<(PciPath, i32)> {
        // Counted over every GPU, resolvable or not, as CUDA counts them.
        let bdf = self.gpu_bus_ids().into_iter().nth(ordinal)?;
        self.pci_function(&bdf).map(|f| (f.path, f.numa))
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
