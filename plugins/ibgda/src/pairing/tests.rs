use super::*;
use crate::rng::Rng;

/// One PCIe switch: which root complex it hangs from, its GPUs, its NICs
/// (slot, ports).
type Switch = (usize, Vec<u32>, Vec<(u32, u8)>);

/// Builds a host of two root complexes from switch descriptions, adding the
/// switches in `order` (to check the result does not depend on build order).
fn host_in_order(switches: &[Switch], order: &[usize]) -> Topology {
    let mut t = Topology::new();
    let roots = [t.root(), t.root()];
    for &i in order {
        let (root, gpus, nics) = &switches[i];
        let sw = t.switch(roots[*root]).unwrap();
        for &g in gpus.iter().rev() {
            t.gpu(sw, g).unwrap();
        }
        for &(slot, ports) in nics {
            t.nic(sw, slot, ports).unwrap();
        }
    }
    t
}

fn host(switches: &[Switch]) -> Topology {
    let order: Vec<usize> = (0..switches.len()).collect();
    host_in_order(switches, &order)
}

/// DGX-like: 4 switches over 2 sockets, each with 2 GPUs and 2 single-port NICs
/// (GPU i next to NIC i), minus the NICs in `missing`.
fn eight_by_eight(missing: &[u32]) -> Vec<Switch> {
    (0..4u32)
        .map(|s| {
            let nics = [2 * s, 2 * s + 1]
                .into_iter()
                .filter(|n| !missing.contains(n))
                .map(|n| (n, 1))
                .collect();
            ((s / 2) as usize, vec![2 * s, 2 * s + 1], nics)
        })
        .collect()
}

/// What must hold for any topology: one pairing per GPU in index order; the
/// primary is a closest NIC and a real port; the backup follows the rules in
/// their order of preference and is never the primary port.
fn check_rules(topo: &Topology, pairs: &[Pairing]) {
    let gpus: Vec<(u32, NodeId)> = topo.gpus().collect();
    let nics: Vec<NicInfo> = topo.nics().collect();
    assert_eq!(
        pairs.iter().map(|p| p.gpu).collect::<Vec<_>>(),
        gpus.iter().map(|g| g.0).collect::<Vec<_>>()
    );
    for (p, &(_, node)) in pairs.iter().zip(&gpus) {
        let nic = topo.nic_in_slot(p.primary.slot).expect("primary exists");
        let best = nics.iter().map(|n| topo.hops(node, n.node)).min().unwrap();
        assert_eq!(p.primary_hops, best, "GPU {}: primary not closest", p.gpu);
        assert_eq!(topo.hops(node, nic.node), p.primary_hops);
        assert!((1..=nic.ports).contains(&p.primary.port));
        let expect_rule = if nic.ports == 2 {
            Some(BackupRule::OtherPort)
        } else if topo.nic_in_slot(nic.slot ^ 1).is_some() {
            Some(BackupRule::AdjacentNic)
        } else if nics.len() > 1 {
            Some(BackupRule::ClosestOther)
        } else {
            None
        };
        assert_eq!(p.backup.map(|b| b.1), expect_rule, "GPU {}", p.gpu);
        if let Some((b, rule)) = p.backup {
            assert_ne!(b, p.primary, "GPU {}: backup is the primary", p.gpu);
            let bn = topo.nic_in_slot(b.slot).expect("backup exists");
            assert!((1..=bn.ports).contains(&b.port));
            match rule {
                BackupRule::OtherPort => assert_eq!(b.slot, p.primary.slot),
                BackupRule::AdjacentNic => assert_eq!(b.slot, p.primary.slot ^ 1),
                BackupRule::ClosestOther => {
                    let best_other = nics
                        .iter()
                        .filter(|n| n.slot != p.primary.slot)
                        .map(|n| topo.hops(node, n.node))
                        .min();
                    assert_eq!(Some(topo.hops(node, bn.node)), best_other);
                }
            }
        }
    }
}

#[test]
fn eight_gpus_eight_nics_each_gpu_its_own_nic_and_the_adjacent_as_backup() {
    let topo = host(&eight_by_eight(&[]));
    let pairs = pair(&topo).unwrap();
    check_rules(&topo, &pairs);
    for p in &pairs {
        // GPU i shares its switch with NICs 2⌊i/2⌋ and 2⌊i/2⌋+1: one each.
        assert_eq!(
            p.primary,
            PortRef {
                slot: p.gpu,
                port: 1
            }
        );
        assert_eq!(p.primary_hops, 2);
        assert_eq!(
            p.backup,
            Some((
                PortRef {
                    slot: p.gpu ^ 1,
                    port: 1
                },
                BackupRule::AdjacentNic
            ))
        );
    }
    // Pairs back each other up: my backup is my neighbour's primary.
    for p in &pairs {
        let (b, _) = p.backup.unwrap();
        let neighbour = pairs.iter().find(|q| q.primary == b).unwrap();
        assert_eq!(neighbour.backup.unwrap().0, p.primary);
    }
}

#[test]
fn eight_gpus_four_dual_port_nics_share_a_card_one_port_each() {
    let switches: Vec<Switch> = (0..4u32)
        .map(|s| ((s / 2) as usize, vec![2 * s, 2 * s + 1], vec![(s, 2)]))
        .collect();
    let topo = host(&switches);
    let pairs = pair(&topo).unwrap();
    check_rules(&topo, &pairs);
    let mut used = std::collections::BTreeSet::new();
    for p in &pairs {
        assert_eq!(
            p.primary.slot,
            p.gpu / 2,
            "GPU {} uses its switch's NIC",
            p.gpu
        );
        assert!(used.insert(p.primary), "{} taken twice", p.primary);
        let (b, rule) = p.backup.unwrap();
        assert_eq!(rule, BackupRule::OtherPort);
        assert_eq!(b.slot, p.primary.slot);
        assert_ne!(b.port, p.primary.port);
    }
    assert_eq!(used.len(), 8, "every port carries one GPU");
}

#[test]
fn uneven_counts_share_the_closest_nics_evenly() {
    // 8 GPUs, 6 NICs: the outer switches hold one NIC, the inner ones two.
    let switches: Vec<Switch> = vec![
        (0, vec![0, 1], vec![(0, 1)]),
        (0, vec![2, 3], vec![(2, 1), (3, 1)]),
        (1, vec![4, 5], vec![(4, 1), (5, 1)]),
        (1, vec![6, 7], vec![(6, 1)]),
    ];
    let topo = host(&switches);
    let pairs = pair(&topo).unwrap();
    check_rules(&topo, &pairs);
    let mut per_nic = std::collections::BTreeMap::<u32, u32>::new();
    for p in &pairs {
        *per_nic.entry(p.primary.slot).or_default() += 1;
        assert_eq!(p.primary_hops, 2, "GPU {} stays on its switch", p.gpu);
    }
    // NICs 0 and 6 carry both GPUs of their switch; the others one each.
    for (slot, n) in per_nic {
        let alone = switches.iter().any(|s| s.2 == vec![(slot, 1)]);
        assert_eq!(n, if alone { 2 } else { 1 }, "NIC {slot}");
    }
    // Fewer GPUs than NICs: 4 GPUs on one socket, 8 NICs.
    let switches: Vec<Switch> = vec![
        (0, vec![0, 1], vec![(0, 1), (1, 1), (2, 1), (3, 1)]),
        (0, vec![2, 3], vec![(4, 1), (5, 1), (6, 1), (7, 1)]),
    ];
    let topo = host(&switches);
    let pairs = pair(&topo).unwrap();
    check_rules(&topo, &pairs);
    let slots: Vec<u32> = pairs.iter().map(|p| p.primary.slot).collect();
    assert_eq!(
        slots,
        vec![0, 1, 4, 5],
        "equally close NICs go to the least loaded, lowest slot"
    );
}

#[test]
fn a_missing_nic_changes_only_the_pairs_that_used_it() {
    let full = pair(&host(&eight_by_eight(&[]))).unwrap();
    let topo = host(&eight_by_eight(&[3]));
    let pairs = pair(&topo).unwrap();
    check_rules(&topo, &pairs);
    for (a, b) in full.iter().zip(&pairs) {
        if a.gpu != 2 && a.gpu != 3 {
            assert_eq!(a, b, "GPU {} was re-paired", a.gpu);
        }
    }
    // GPU 3 falls back to NIC 2, the one left on its switch; NIC 2's partner
    // slot is empty, so both back up on the closest other NIC, on the same
    // socket (NIC 0: two hops nearer than the other socket, lower slot than 1).
    for g in [2, 3] {
        let p = pairs[g as usize];
        assert_eq!(p.primary.slot, 2);
        assert_eq!(
            p.backup,
            Some((PortRef { slot: 0, port: 1 }, BackupRule::ClosestOther))
        );
    }
}

#[test]
fn one_nic_and_no_nic() {
    let single = host(&[(0, vec![0, 1], vec![(5, 1)])]);
    let pairs = pair(&single).unwrap();
    check_rules(&single, &pairs);
    assert!(pairs
        .iter()
        .all(|p| p.backup.is_none() && p.primary.slot == 5));
    let dual = host(&[(0, vec![0, 1], vec![(5, 2)])]);
    let pairs = pair(&dual).unwrap();
    check_rules(&dual, &pairs);
    assert_eq!(pairs[0].backup.unwrap().0, pairs[1].primary);
    assert_eq!(pairs[1].backup.unwrap().0, pairs[0].primary);
    let none = host(&[(0, vec![0, 1, 2], vec![])]);
    let e = pair(&none).unwrap_err();
    assert_eq!(e, PairingError::NoNics { gpus: 3 });
    assert!(e.to_string().contains("3 GPUs"), "{e}");
    assert_eq!(pair(&Topology::new()), Ok(vec![]));
}

#[test]
fn the_result_does_not_depend_on_build_order() {
    let switches = eight_by_eight(&[5]);
    let expect = pair(&host(&switches)).unwrap();
    let mut rng = Rng::new(11);
    for _ in 0..20 {
        let mut order: Vec<usize> = (0..switches.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        assert_eq!(pair(&host_in_order(&switches, &order)).unwrap(), expect);
    }
}

#[test]
fn hops_count_links_through_switches_and_sockets() {
    let mut t = Topology::new();
    let (r0, r1) = (t.root(), t.root());
    let s0 = t.switch(r0).unwrap();
    let s00 = t.switch(s0).unwrap();
    let s1 = t.switch(r1).unwrap();
    let g = t.gpu(s00, 0).unwrap();
    let near = t.nic(s00, 0, 1).unwrap();
    let mid = t.nic(s0, 1, 1).unwrap();
    let far = t.nic(s1, 2, 1).unwrap();
    assert_eq!(t.hops(g, g), 0);
    assert_eq!(t.hops(g, near), 2);
    assert_eq!(t.hops(g, mid), 3);
    // g → s00 → s0 → r0 → system → r1 → s1 → far
    assert_eq!(t.hops(g, far), 7);
    assert_eq!(t.hops(far, g), 7);
    assert_eq!(t.hops(r0, r1), 2);
}

#[test]
fn malformed_topologies_are_refused_with_the_reason() {
    let mut t = Topology::new();
    let r = t.root();
    let g = t.gpu(r, 0).unwrap();
    assert_eq!(t.gpu(r, 0), Err(TopologyError::DuplicateGpu(0)));
    assert_eq!(t.nic(g, 1, 1), Err(TopologyError::ParentIsDevice(g)));
    t.nic(r, 1, 1).unwrap();
    assert_eq!(t.nic(r, 1, 2), Err(TopologyError::DuplicateNic(1)));
    for ports in [0, 3] {
        let e = t.nic(r, 9, ports).unwrap_err();
        assert_eq!(e, TopologyError::BadPortCount { slot: 9, ports });
        assert!(e.to_string().contains("slot 9"), "{e}");
    }
    let mut other = Topology::new();
    let foreign = {
        let r = other.root();
        other.switch(r).unwrap()
    };
    let mut small = Topology::new();
    assert_eq!(
        small.switch(foreign),
        Err(TopologyError::UnknownParent(foreign))
    );
}

/// `switches` as sysfs would place them: per switch a root port, the switch's
/// upstream port and one downstream port per device, below the root complex
/// of its socket (bus numbers made up, unique per switch).
fn pci_devices(switches: &[Switch]) -> Vec<PciDevice> {
    let mut out = Vec::new();
    for (s, (root, gpus, nics)) in switches.iter().enumerate() {
        let bus = 0x10 + 0x20 * s;
        let chain = |port: usize| -> Vec<String> {
            vec![
                format!("pci0000:{:02x}", 0x80 * root),
                format!("0000:{:02x}:01.0", 0x80 * root),
                format!("0000:{bus:02x}:00.0"),
                format!("0000:{:02x}:{port:02x}.0", bus + 1),
                format!("0000:{:02x}:00.0", bus + 2 + port),
            ]
        };
        let mut port = 0;
        for &g in gpus {
            out.push(PciDevice::Gpu {
                index: g,
                path: chain(port),
            });
            port += 1;
        }
        for &(slot, ports) in nics {
            out.push(PciDevice::Nic {
                slot,
                ports,
                path: chain(port),
            });
            port += 1;
        }
    }
    out
}

/// A GPU's primary and backup.
type Ports = (u32, PortRef, Option<(PortRef, BackupRule)>);

/// The ports each GPU gets (hops left out: sysfs chains count every port).
fn ports(pairs: &[Pairing]) -> Vec<Ports> {
    pairs.iter().map(|p| (p.gpu, p.primary, p.backup)).collect()
}

#[test]
fn sysfs_paths_pair_as_the_hand_built_host_whatever_their_order() {
    for missing in [&[][..], &[3][..], &[0, 5][..]] {
        let switches = eight_by_eight(missing);
        let mut devices = pci_devices(&switches);
        let want = ports(&pair(&host(&switches)).unwrap());
        let mut rng = Rng::new(0x5f5 + missing.len() as u64);
        for _ in 0..5 {
            let topo = Topology::from_pci(&devices).unwrap();
            let got = pair(&topo).unwrap();
            check_rules(&topo, &got);
            assert_eq!(ports(&got), want, "missing {missing:?}");
            // GPU i and its NIC share a switch: 4 links (down, up, up, down).
            assert!(got.iter().all(|p| p.primary_hops == 4), "{got:?}");
            for i in (1..devices.len()).rev() {
                devices.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
    }
}

#[test]
fn sysfs_paths_without_a_root_complex_are_refused() {
    let gpu = |path: &[&str]| PciDevice::Gpu {
        index: 3,
        path: path.iter().map(|s| s.to_string()).collect(),
    };
    for bad in [
        &[][..],
        &["0000:17:00.0"][..],
        &["0000:16:02.0", "0000:17:00.0"][..],
    ] {
        let e = Topology::from_pci(&[gpu(bad)]).unwrap_err();
        assert_eq!(e, TopologyError::BadPciPath { gpu: true, id: 3 });
        assert!(e.to_string().contains("GPU 3"), "{e}");
    }
    // Devices straight below a root complex are fine.
    let t = Topology::from_pci(&[gpu(&["pci0000:00", "0000:00:05.0"])]).unwrap();
    assert_eq!(t.gpus().count(), 1);
    // A NIC listed twice is the builder's error.
    let nic = PciDevice::Nic {
        slot: 1,
        ports: 1,
        path: vec!["pci0000:00".into(), "0000:00:06.0".into()],
    };
    assert_eq!(
        Topology::from_pci(&[nic.clone(), nic]).unwrap_err(),
        TopologyError::DuplicateNic(1)
    );
}

#[test]
fn nic_slots_come_from_the_names_or_the_order() {
    assert_eq!(nic_slots(&["mlx5_0", "mlx5_1", "mlx5_3"]), vec![0, 1, 3]);
    assert_eq!(nic_slots(&["mlx5_10", "mlx5_2"]), vec![10, 2]);
    // A name without a number, or two with one number: positions.
    assert_eq!(nic_slots(&["mlx5_0", "ibp12s0"]), vec![0, 1]);
    assert_eq!(nic_slots(&["a_1", "b_1"]), vec![0, 1]);
    assert!(nic_slots(&[]).is_empty());
}
