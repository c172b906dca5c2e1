//! Topology tests on sysfs trees built in a temporary directory, laid out as the kernel
//! does: real directories under `devices/pci…`, and `class/infiniband/<dev>` and
//! `bus/pci/devices/<bdf>` as relative symlinks into them.

use super::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

/// A throw-away sysfs tree, removed on drop.
pub(crate) struct Tree {
    pub root: PathBuf,
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, format!("{s}\n")).unwrap();
}

impl Tree {
    pub fn new(tag: &str) -> Tree {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "ferrocx-ib-sysfs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, AtomicOrdering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Tree { root }
    }

    pub fn sysfs(&self) -> Sysfs {
        Sysfs::new(&self.root)
    }

    /// `devices/<pci…>`: a PCI function with its NUMA node.
    fn pci(&self, pci: &[&str], numa: i32) -> PathBuf {
        let d = self.root.join("devices").join(pci.join("/"));
        fs::create_dir_all(&d).unwrap();
        write(&d.join("numa_node"), &numa.to_string());
        d
    }

    /// An RDMA device at `pci` with `ports` = (number, active, link layer).
    pub fn nic(&self, name: &str, pci: &[&str], numa: i32, ports: &[(u8, bool, &str)]) {
        let func = self.pci(pci, numa);
        let dev = func.join("infiniband").join(name);
        fs::create_dir_all(&dev).unwrap();
        // The kernel's link: class/infiniband/<dev>/device -> ../../../<bdf>
        symlink(
            format!("../../../{}", pci.last().unwrap()),
            dev.join("device"),
        )
        .unwrap();
        for &(port, active, ll) in ports {
            let p = dev.join(format!("ports/{port}"));
            let state = if active { "4: ACTIVE" } else { "1: DOWN" };
            write(&p.join("state"), state);
            write(&p.join("link_layer"), ll);
            write(
                &p.join("lid"),
                if ll == "InfiniBand" { "0x1a" } else { "0x0" },
            );
            // A zero entry as the kernel shows unused slots.
            write(&p.join("gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000");
            write(&p.join("gids/0"), "fe80:0000:0000:0000:0202:c9ff:fe00:0001");
            write(&p.join("gid_attrs/types/0"), "IB/RoCE v1");
        }
        let class = self.root.join("class/infiniband");
        fs::create_dir_all(&class).unwrap();
        symlink(
            format!("../../devices/{}/infiniband/{name}", pci.join("/")),
            class.join(name),
        )
        .unwrap();
    }

    pub fn gid(&self, name: &str, port: u8, index: u8, gid: &str, kind: &str) {
        let p = self
            .root
            .join(format!("class/infiniband/{name}/ports/{port}"));
        write(&p.join(format!("gids/{index}")), gid);
        write(&p.join(format!("gid_attrs/types/{index}")), kind);
    }

    /// An NVIDIA GPU at `pci`, listed under `bus/pci/devices`.
    pub fn gpu(&self, pci: &[&str], numa: i32) {
        let func = self.pci(pci, numa);
        write(&func.join("vendor"), "0x10de");
        write(&func.join("class"), "0x030200");
        self.bus_link(pci);
    }

    /// Some other PCI function listed under `bus/pci/devices` (not a GPU).
    pub fn other(&self, pci: &[&str], vendor: &str, class: &str) {
        let func = self.pci(pci, 0);
        write(&func.join("vendor"), vendor);
        write(&func.join("class"), class);
        self.bus_link(pci);
    }

    fn bus_link(&self, pci: &[&str]) {
        let bus = self.root.join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        symlink(
            format!("../../../devices/{}", pci.join("/")),
            bus.join(pci.last().unwrap()),
        )
        .unwrap();
    }

    pub fn cpu(&self, cpu: usize, node: i32) {
        let d = self.root.join(format!("devices/system/cpu/cpu{cpu}"));
        fs::create_dir_all(&d).unwrap();
        let n = self.root.join(format!("devices/system/node/node{node}"));
        fs::create_dir_all(&n).unwrap();
        symlink(
            format!("../../node/node{node}"),
            d.join(format!("node{node}")),
        )
        .unwrap();
    }
}

// A two-socket host in the DGX style: on each socket, a host bridge with two PCIe
// switches, each switch holding one GPU and one single-port NIC.
//
//   pci0000:00 ─ 00:01.0 ─ sw 01:00.0 ─ 02:00.0 ─ GPU0 03:00.0
//              │                      └ 02:01.0 ─ mlx5_0 04:00.0
//              └ 00:02.0 ─ sw 05:00.0 ─ 06:00.0 ─ GPU1 07:00.0
//                                     └ 06:01.0 ─ mlx5_1 08:00.0
//   pci0000:80 ─ 80:01.0 ─ sw 81:00.0 ─ 82:00.0 ─ GPU2 83:00.0
//              │                      └ 82:01.0 ─ mlx5_2 84:00.0
//              └ 80:02.0 ─ sw 85:00.0 ─ 86:00.0 ─ GPU3 87:00.0
//                                     └ 86:01.0 ─ mlx5_3 88:00.0
const GPU0: &[&str] = &[
    "pci0000:00",
    "0000:00:01.0",
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:03:00.0",
];
const NIC0: &[&str] = &[
    "pci0000:00",
    "0000:00:01.0",
    "0000:01:00.0",
    "0000:02:01.0",
    "0000:04:00.0",
];
const GPU1: &[&str] = &[
    "pci0000:00",
    "0000:00:02.0",
    "0000:05:00.0",
    "0000:06:00.0",
    "0000:07:00.0",
];
const NIC1: &[&str] = &[
    "pci0000:00",
    "0000:00:02.0",
    "0000:05:00.0",
    "0000:06:01.0",
    "0000:08:00.0",
];
const GPU2: &[&str] = &[
    "pci0000:80",
    "0000:80:01.0",
    "0000:81:00.0",
    "0000:82:00.0",
    "0000:83:00.0",
];
const NIC2: &[&str] = &[
    "pci0000:80",
    "0000:80:01.0",
    "0000:81:00.0",
    "0000:82:01.0",
    "0000:84:00.0",
];
const GPU3: &[&str] = &[
    "pci0000:80",
    "0000:80:02.0",
    "0000:85:00.0",
    "0000:86:00.0",
    "0000:87:00.0",
];
const NIC3: &[&str] = &[
    "pci0000:80",
    "0000:80:02.0",
    "0000:85:00.0",
    "0000:86:01.0",
    "0000:88:00.0",
];

fn dgx(tag: &str, nic_ports: &[(u8, bool, &str)]) -> Tree {
    let t = Tree::new(tag);
    for (gpu, nic, name, numa) in [
        (GPU0, NIC0, "mlx5_0", 0),
        (GPU1, NIC1, "mlx5_1", 0),
        (GPU2, NIC2, "mlx5_2", 1),
        (GPU3, NIC3, "mlx5_3", 1),
    ] {
        t.gpu(gpu, numa);
        t.nic(name, nic, numa, nic_ports);
    }
    // A non-GPU NVIDIA function (audio) and an Intel NIC must not count as GPUs.
    t.other(&["pci0000:00", "0000:00:1f.3"], "0x10de", "0x040300");
    t.other(&["pci0000:00", "0000:00:1f.6"], "0x8086", "0x020000");
    t.cpu(0, 0);
    t.cpu(1, 1);
    t
}

const IB1: &[(u8, bool, &str)] = &[(1, true, "InfiniBand")];

fn gpu_anchor(s: &Sysfs, ordinal: usize) -> Anchor {
    let (path, numa) = s.gpu(ordinal).expect("gpu in fixture");
    Anchor::Pci { path, numa }
}

fn pick(
    s: &Sysfs,
    spec: Option<&HcaSpec>,
    anchor: &Anchor,
    lr: usize,
) -> (String, Option<(String, BackupKind)>) {
    let nics = usable(&s.scan().unwrap(), spec);
    let c = choose(&nics, spec, anchor, lr, true).expect("a choice");
    (
        c.primary.to_string(),
        c.backup.map(|(b, k)| (b.to_string(), k)),
    )
}

#[test]
fn scan_reads_devices_ports_and_gids() {
    let t = dgx("scan", &[(1, true, "InfiniBand"), (2, false, "Ethernet")]);
    let nics = t.sysfs().scan().unwrap();
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    let n0 = &nics[0];
    assert_eq!(n0.numa, 0);
    assert_eq!(n0.pci.as_ref().unwrap().0, NIC0);
    assert_eq!(n0.pci.as_ref().unwrap().bus_id(), "0000:04:00.0");
    assert_eq!(nics[3].numa, 1);
    assert_eq!(n0.ports.len(), 2);
    let (p1, p2) = (&n0.ports[0], &n0.ports[1]);
    assert!(p1.active && !p2.active);
    assert_eq!(
        (p1.link_layer, p2.link_layer),
        (LinkLayer::InfiniBand, LinkLayer::Ethernet)
    );
    assert_eq!((p1.lid, p2.lid), (0x1a, 0));
    assert_eq!(p1.gids.len(), 1, "the zero GID is skipped");
    assert_eq!(p1.gids[0].gid[..2], [0xfe, 0x80]);
    assert_eq!(p1.gids[0].gid[15], 1);
}

#[test]
fn scan_without_rdma_is_empty() {
    let t = Tree::new("empty");
    assert!(t.sysfs().scan().unwrap().is_empty());
    assert!(t.sysfs().gpu(0).is_none());
    assert!(t.sysfs().cpu_numa(0).is_none());
}

#[test]
fn natural_order_of_device_names() {
    let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1", "bnxt_re0", "mlx5_0"];
    v.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(v, ["bnxt_re0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10"]);
}

#[test]
fn gpus_are_found_in_bus_order_and_cpus_by_node() {
    let t = dgx("gpus", IB1);
    let s = t.sysfs();
    assert_eq!(
        s.gpu(0).unwrap(),
        (PciPath(GPU0.iter().map(|s| s.to_string()).collect()), 0)
    );
    assert_eq!(s.gpu(3).unwrap().0.bus_id(), "0000:87:00.0");
    assert_eq!(s.gpu(3).unwrap().1, 1);
    assert!(
        s.gpu(4).is_none(),
        "audio function and Intel NIC are not GPUs"
    );
    assert_eq!((s.cpu_numa(0), s.cpu_numa(1)), (Some(0), Some(1)));
}

#[test]
fn distance_classes_follow_pci_topology() {
    let t = dgx("dist", IB1);
    let s = t.sysfs();
    let nics = s.scan().unwrap();
    let g0 = gpu_anchor(&s, 0);
    let d: Vec<Distance> = nics.iter().map(|n| distance(&g0, n)).collect();
    // GPU0 and mlx5_0 share switch 01:00.0: two links down from it on each side.
    assert_eq!(
        d[0],
        Distance {
            class: PathClass::Bridge,
            hops: 4
        }
    );
    assert_eq!(
        d[1],
        Distance {
            class: PathClass::HostBridge,
            hops: 8
        }
    );
    assert_eq!(d[2].class, PathClass::System, "other socket");
    assert!(d[0] < d[1] && d[1] < d[2]);
    // Same NUMA node, different root complex: NODE.
    let mut other_root = nics[2].clone();
    other_root.numa = 0;
    assert_eq!(distance(&g0, &other_root).class, PathClass::Node);
    // A CPU anchor only sees NUMA nodes.
    assert_eq!(distance(&Anchor::Numa(1), &nics[3]).class, PathClass::Node);
    assert_eq!(
        distance(&Anchor::Numa(0), &nics[3]).class,
        PathClass::System
    );
    assert_eq!(distance(&Anchor::Unknown, &nics[3]).class, PathClass::Node);
}

#[test]
fn each_gpu_gets_its_own_nic_and_the_adjacent_one_as_backup() {
    let t = dgx("gpu-choice", IB1);
    let s = t.sysfs();
    let expect = [
        ("mlx5_0:1", "mlx5_1:1"),
        ("mlx5_1:1", "mlx5_0:1"),
        ("mlx5_2:1", "mlx5_3:1"),
        ("mlx5_3:1", "mlx5_2:1"),
    ];
    for (g, (p, b)) in expect.iter().enumerate() {
        let (prim, backup) = pick(&s, None, &gpu_anchor(&s, g), g);
        assert_eq!(prim, *p, "GPU{g}");
        assert_eq!(
            backup,
            Some((b.to_string(), BackupKind::AdjacentNic)),
            "GPU{g}"
        );
    }
}

#[test]
fn dual_port_nics_back_up_on_their_other_port() {
    let t = dgx("dual", &[(1, true, "InfiniBand"), (2, true, "InfiniBand")]);
    let s = t.sysfs();
    let (prim, backup) = pick(&s, None, &gpu_anchor(&s, 2), 0);
    assert_eq!(prim, "mlx5_2:1");
    assert_eq!(backup, Some(("mlx5_2:2".into(), BackupKind::SameNicPort)));
    // Restricting to port 1 leaves single-port NICs again: adjacent NIC.
    let spec = HcaSpec::parse("mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1").unwrap();
    let (prim, backup) = pick(&s, Some(&spec), &gpu_anchor(&s, 2), 0);
    assert_eq!(prim, "mlx5_2:1");
    assert_eq!(backup, Some(("mlx5_3:1".into(), BackupKind::AdjacentNic)));
}

#[test]
fn down_ports_and_excluded_devices_are_skipped() {
    let t = dgx("down", &[(1, false, "InfiniBand"), (2, true, "Ethernet")]);
    let s = t.sysfs();
    // Port 1 is down everywhere: port 2 is primary, no second port, adjacent NIC backs up.
    let (prim, backup) = pick(&s, None, &gpu_anchor(&s, 0), 0);
    assert_eq!(prim, "mlx5_0:2");
    assert_eq!(backup, Some(("mlx5_1:2".into(), BackupKind::AdjacentNic)));
    // Excluding GPU0's NIC: the next closest (same host bridge) is primary.
    let spec = HcaSpec::parse("^mlx5_0").unwrap();
    let (prim, backup) = pick(&s, Some(&spec), &gpu_anchor(&s, 0), 0);
    assert_eq!(prim, "mlx5_1:2");
    // Usable list is now [mlx5_1, mlx5_2, mlx5_3]: mlx5_1 is index 0, its pair index 1.
    assert_eq!(backup, Some(("mlx5_2:2".into(), BackupKind::AdjacentNic)));
    // Exact single device: no backup NIC exists.
    let spec = HcaSpec::parse("=mlx5_3").unwrap();
    let (prim, backup) = pick(&s, Some(&spec), &gpu_anchor(&s, 0), 0);
    assert_eq!((prim.as_str(), backup), ("mlx5_3:2", None));
    // Nothing usable at all.
    let spec = HcaSpec::parse("mlx5_0:1").unwrap();
    assert!(usable(&s.scan().unwrap(), Some(&spec)).is_empty());
    assert!(choose(&[], None, &Anchor::Unknown, 0, true).is_none());
}

#[test]
fn cpu_anchors_spread_local_ranks_over_equal_nics() {
    let t = dgx("cpu", IB1);
    let s = t.sysfs();
    let node0 = Anchor::Numa(s.cpu_numa(0).unwrap());
    let got: Vec<String> = (0..4).map(|lr| pick(&s, None, &node0, lr).0).collect();
    assert_eq!(got, ["mlx5_0:1", "mlx5_1:1", "mlx5_0:1", "mlx5_1:1"]);
    let node1 = Anchor::Numa(1);
    assert_eq!(pick(&s, None, &node1, 0).0, "mlx5_2:1");
    // An include list orders equally close devices.
    let spec = HcaSpec::parse("mlx5_1,mlx5_0").unwrap();
    assert_eq!(pick(&s, Some(&spec), &node0, 0).0, "mlx5_1:1");
    assert_eq!(pick(&s, Some(&spec), &node0, 1).0, "mlx5_1:1");
}

#[test]
fn no_backup_when_disabled() {
    let t = dgx("nobackup", IB1);
    let nics = usable(&t.sysfs().scan().unwrap(), None);
    let c = choose(&nics, None, &Anchor::Unknown, 0, false).unwrap();
    assert_eq!((c.primary.to_string(), c.backup), ("mlx5_0:1".into(), None));
}

#[test]
fn adjacent_pairs_even_with_odd() {
    assert_eq!(adjacent(0, 8), Some(1));
    assert_eq!(adjacent(1, 8), Some(0));
    assert_eq!(adjacent(6, 8), Some(7));
    assert_eq!(adjacent(7, 8), Some(6));
    // Odd count: the last one pairs with the one before it.
    assert_eq!(adjacent(4, 5), Some(3));
    assert_eq!(adjacent(0, 1), None);
    assert_eq!(adjacent(3, 3), None);
}

#[test]
fn gid_choice_prefers_roce_v2_ipv4() {
    let t = Tree::new("gids");
    t.nic("mlx5_0", NIC0, 0, &[(1, true, "Ethernet")]);
    t.gid(
        "mlx5_0",
        1,
        1,
        "fe80:0000:0000:0000:0202:c9ff:fe00:0001",
        "RoCE v2",
    );
    t.gid(
        "mlx5_0",
        1,
        2,
        "0000:0000:0000:0000:0000:ffff:0a00:0001",
        "IB/RoCE v1",
    );
    t.gid(
        "mlx5_0",
        1,
        3,
        "0000:0000:0000:0000:0000:ffff:0a00:0001",
        "RoCE v2",
    );
    t.gid(
        "mlx5_0",
        1,
        5,
        "fd00:0000:0000:0000:0000:0000:0000:0007",
        "RoCE v2",
    );
    let nics = t.sysfs().scan().unwrap();
    let port = &nics[0].ports[0];
    assert_eq!(port.gids.len(), 5);
    assert_eq!(
        choose_gid(port, None).unwrap().index,
        3,
        "RoCE v2, IPv4-mapped"
    );
    assert_eq!(choose_gid(port, Some(2)).unwrap().index, 2, "forced");
    assert!(
        choose_gid(port, Some(9)).is_none(),
        "forced index must exist"
    );
    let mut no_v4 = port.clone();
    no_v4.gids.retain(|g| g.index != 3);
    assert_eq!(choose_gid(&no_v4, None).unwrap().index, 5, "global RoCE v2");
    no_v4.gids.retain(|g| g.index != 5);
    assert_eq!(
        choose_gid(&no_v4, None).unwrap().index,
        1,
        "link-local RoCE v2"
    );
    let mut ib = port.clone();
    ib.link_layer = LinkLayer::InfiniBand;
    assert_eq!(choose_gid(&ib, None).unwrap().index, 0);
}

#[test]
fn pci_path_from_resolved_sysfs_path() {
    let p = PciPath::from_sysfs(Path::new(
        "/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0",
    ))
    .unwrap();
    assert_eq!(p.0, ["pci0000:16", "0000:16:02.0", "0000:17:00.0"]);
    assert!(PciPath::from_sysfs(Path::new("/sys/devices/virtual/net/lo")).is_none());
}
