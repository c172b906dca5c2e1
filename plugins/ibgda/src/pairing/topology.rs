//! A model of a host's PCI tree: root complexes, PCIe switches, GPUs and NICs.
//! Built by hand in tests, or from the devices' sysfs paths
//! ([`Topology::from_pci`]: the chains net-ib's scanner reads).

use std::collections::BTreeMap;
use std::fmt;

/// A node of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(usize);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A root complex (host bridge) or a PCIe switch: something devices hang from.
    Bridge,
    Gpu,
    Nic,
}

#[derive(Debug, Clone)]
struct Node {
    parent: Option<NodeId>,
    /// Edges from the implicit system node that joins the root complexes (so two
    /// devices under different sockets are farther apart than any two under one).
    depth: u32,
    kind: Kind,
}

/// One NIC as the pairing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicInfo {
    /// Its slot: the stable number the platform gives it (`mlx5_<slot>`). Pairing
    /// is even↔odd on slots, so a missing NIC does not re-pair the others.
    pub slot: u32,
    /// Ports, 1 or 2.
    pub ports: u8,
    /// Where it sits.
    pub node: NodeId,
}

/// Something wrong in the description of a topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyError {
    /// The parent named does not exist in this topology.
    UnknownParent(NodeId),
    /// Devices hang from root complexes or switches, not from other devices.
    ParentIsDevice(NodeId),
    /// Two GPUs with the same index.
    DuplicateGpu(u32),
    /// Two NICs with the same slot.
    DuplicateNic(u32),
    /// A device's sysfs path without a root complex (`pci…`) above the
    /// device's own function.
    BadPciPath {
        /// A GPU's (else a NIC's).
        gpu: bool,
        /// Its index or slot.
        id: u32,
    },
    /// A NIC with a port count other than 1 or 2.
    BadPortCount {
        /// The NIC's slot.
        slot: u32,
        /// The count given.
        ports: u8,
    },
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::UnknownParent(n) => write!(f, "parent node {} does not exist", n.0),
            TopologyError::ParentIsDevice(n) => {
                write!(f, "node {} is a GPU or NIC and cannot be a parent", n.0)
            }
            TopologyError::DuplicateGpu(i) => write!(f, "GPU {i} is listed twice"),
            TopologyError::DuplicateNic(s) => write!(f, "NIC slot {s} is listed twice"),
            TopologyError::BadPciPath { gpu, id } => write!(
                f,
                "{} {id}'s PCI path has no root complex (pci…) above the device",
                if *gpu { "GPU" } else { "NIC slot" }
            ),
            TopologyError::BadPortCount { slot, ports } => {
                write!(
                    f,
                    "NIC slot {slot} has {ports} ports; only 1 or 2 are modelled"
                )
            }
        }
    }
}

impl std::error::Error for TopologyError {}

/// A GPU or NIC as sysfs places it, for [`Topology::from_pci`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PciDevice {
    /// GPU `index` (its CUDA ordinal).
    Gpu {
        /// The ordinal.
        index: u32,
        /// Its path (see [`Topology::from_pci`]).
        path: Vec<String>,
    },
    /// The NIC in `slot` (`mlx5_<slot>`) with `ports` ports.
    Nic {
        /// The slot.
        slot: u32,
        /// Ports, 1 or 2.
        ports: u8,
        /// Its path.
        path: Vec<String>,
    },
}

/// A PCI tree. Distance between two devices is the number of links between them
/// ([`hops`](Self::hops)); the root complexes are joined through one implicit
/// system node standing for the CPU interconnect.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    nodes: Vec<Node>,
    gpus: BTreeMap<u32, NodeId>,
    nics: BTreeMap<u32, NicInfo>,
}

impl Topology {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a root complex (one per socket, typically).
    pub fn root(&mut self) -> NodeId {
        self.push(None, 1, Kind::Bridge)
    }

    /// Adds a PCIe switch below `parent`.
    pub fn switch(&mut self, parent: NodeId) -> Result<NodeId, TopologyError> {
        let depth = self.bridge_depth(parent)? + 1;
        Ok(self.push(Some(parent), depth, Kind::Bridge))
    }

    /// Adds GPU `index` (its CUDA ordinal) below `parent`.
    pub fn gpu(&mut self, parent: NodeId, index: u32) -> Result<NodeId, TopologyError> {
        let depth = self.bridge_depth(parent)? + 1;
        if self.gpus.contains_key(&index) {
            return Err(TopologyError::DuplicateGpu(index));
        }
        let id = self.push(Some(parent), depth, Kind::Gpu);
        self.gpus.insert(index, id);
        Ok(id)
    }

    /// Adds a NIC in `slot` with `ports` ports below `parent`.
    pub fn nic(&mut self, parent: NodeId, slot: u32, ports: u8) -> Result<NodeId, TopologyError> {
        let depth = self.bridge_depth(parent)? + 1;
        if self.nics.contains_key(&slot) {
            return Err(TopologyError::DuplicateNic(slot));
        }
        if !(1..=2).contains(&ports) {
            return Err(TopologyError::BadPortCount { slot, ports });
        }
        let node = self.push(Some(parent), depth, Kind::Nic);
        self.nics.insert(slot, NicInfo { slot, ports, node });
        Ok(node)
    }

    /// The tree of `devices` from their sysfs paths: each path is the
    /// components of the device's resolved path under `/sys/devices`, from
    /// its root complex (`pci0000:16`) through every bridge and switch port
    /// down to the device's own function (`0000:17:00.0`) — what net-ib's
    /// scanner reads (`PciPath`). One root complex per distinct first
    /// component, one bridge per distinct prefix, each device below its last
    /// bridge; the result does not depend on the devices' order.
    pub fn from_pci(devices: &[PciDevice]) -> Result<Topology, TopologyError> {
        let mut t = Topology::new();
        let mut bridges: BTreeMap<Vec<String>, NodeId> = BTreeMap::new();
        // Sorted, so node numbering (and nothing else) is order-free too.
        let mut sorted: Vec<&PciDevice> = devices.iter().collect();
        sorted.sort_by(|a, b| path_of(a).cmp(path_of(b)));
        for d in sorted {
            let path = path_of(d);
            let bad = match d {
                PciDevice::Gpu { index, .. } => TopologyError::BadPciPath {
                    gpu: true,
                    id: *index,
                },
                PciDevice::Nic { slot, .. } => TopologyError::BadPciPath {
                    gpu: false,
                    id: *slot,
                },
            };
            if path.len() < 2 || !path[0].starts_with("pci") {
                return Err(bad);
            }
            let mut parent = None;
            for k in 1..path.len() {
                let prefix = &path[..k];
                let node = match bridges.get(prefix) {
                    Some(&n) => n,
                    None => {
                        let n = match parent {
                            None => t.root(),
                            Some(p) => t.switch(p)?,
                        };
                        bridges.insert(prefix.to_vec(), n);
                        n
                    }
                };
                parent = Some(node);
            }
            let parent = parent.expect("a path of two components or more");
            match d {
                PciDevice::Gpu { index, .. } => t.gpu(parent, *index)?,
                PciDevice::Nic { slot, ports, .. } => t.nic(parent, *slot, *ports)?,
            };
        }
        Ok(t)
    }

    /// GPUs by index.
    pub fn gpus(&self) -> impl Iterator<Item = (u32, NodeId)> + '_ {
        self.gpus.iter().map(|(&i, &n)| (i, n))
    }

    /// NICs by slot.
    pub fn nics(&self) -> impl Iterator<Item = NicInfo> + '_ {
        self.nics.values().copied()
    }

    /// The NIC in `slot`, if present.
    pub fn nic_in_slot(&self, slot: u32) -> Option<NicInfo> {
        self.nics.get(&slot).copied()
    }

    /// Links between `a` and `b` (through the system node if they are under
    /// different root complexes).
    pub fn hops(&self, a: NodeId, b: NodeId) -> u32 {
        let (mut a, mut b) = (Some(a), Some(b));
        let mut hops = 0;
        loop {
            match (a, b) {
                (Some(x), Some(y)) if x == y => return hops,
                (Some(x), Some(y)) => {
                    let (dx, dy) = (self.nodes[x.0].depth, self.nodes[y.0].depth);
                    if dx >= dy {
                        a = self.nodes[x.0].parent;
                        hops += 1;
                    }
                    if dy >= dx {
                        b = self.nodes[y.0].parent;
                        hops += 1;
                    }
                }
                // Both reached the system node (or one side did and the other
                // is a root, handled as the other climbs).
                (None, None) => return hops,
                (None, Some(y)) => {
                    b = self.nodes[y.0].parent;
                    hops += 1;
                }
                (Some(x), None) => {
                    a = self.nodes[x.0].parent;
                    hops += 1;
                }
            }
        }
    }

    fn push(&mut self, parent: Option<NodeId>, depth: u32, kind: Kind) -> NodeId {
        self.nodes.push(Node {
            parent,
            depth,
            kind,
        });
        NodeId(self.nodes.len() - 1)
    }

    fn bridge_depth(&self, parent: NodeId) -> Result<u32, TopologyError> {
        let node = self
            .nodes
            .get(parent.0)
            .ok_or(TopologyError::UnknownParent(parent))?;
        if node.kind != Kind::Bridge {
            return Err(TopologyError::ParentIsDevice(parent));
        }
        Ok(node.depth)
    }
}

fn path_of(d: &PciDevice) -> &[String] {
    match d {
        PciDevice::Gpu { path, .. } | PciDevice::Nic { path, .. } => path,
    }
}
