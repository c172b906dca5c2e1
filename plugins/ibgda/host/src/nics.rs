//! This host's GPU↔NIC pairing as the mlx5 handler would use it: the GPUs
//! and RDMA NICs that sysfs lists ([`ferrocx_sdk::sysfs`], net-ib's scan),
//! placed on their PCI tree ([`Topology::from_pci`]) and paired by
//! [`ferrocx_ibgda::pairing::pair`]. The proxy handler's paths are
//! copy-engine streams, so nothing here changes what it does: `describe`
//! reports the pairing, which is how it is seen on a real host.

use ferrocx_ibgda::pairing::{nic_slots, pair, BackupRule, Pairing, PciDevice, Topology};
use ferrocx_sdk::sysfs::{GidEntry, GidKind, LinkLayer, Nic, PortInfo, Sysfs};

/// This host's GPUs and RDMA NICs on PCI, paired ([`pair`]).
struct Paired {
    gpus: Vec<ferrocx_sdk::sysfs::PciFunction>,
    /// The NICs on PCI, in the order of `slots`.
    nics: Vec<Nic>,
    slots: Vec<u32>,
    pairs: Vec<Pairing>,
}

/// Scan and pair, or why not (the reasons `describe` prints).
fn paired(sysfs: &Sysfs) -> Result<Paired, String> {
    let root = sysfs.root().display();
    let nics = sysfs
        .scan()
        .map_err(|e| format!("cannot read {root}/class/infiniband: {e}"))?;
    let (placed, unplaced): (Vec<_>, Vec<_>) = nics.into_iter().partition(|n| n.pci.is_some());
    if placed.is_empty() {
        return Err(match unplaced.len() {
            0 => format!("no RDMA NIC under {root}/class/infiniband: nothing to pair"),
            k => format!("{k} RDMA device(s) under {root}/class/infiniband, none on PCI (soft-RoCE?): nothing to pair"),
        });
    }
    let gpus = sysfs.gpus();
    let names: Vec<&str> = placed.iter().map(|n| n.name.as_str()).collect();
    let slots = nic_slots(&names);
    let mut devices: Vec<PciDevice> = gpus
        .iter()
        .enumerate()
        .map(|(i, g)| PciDevice::Gpu {
            index: i as u32,
            path: g.path.0.clone(),
        })
        .collect();
    for (n, &slot) in placed.iter().zip(&slots) {
        // Active ports only (a down one must not be chosen; a NIC with none
        // is not offered, keeping its slot so the others pair as before);
        // the pairing knows single- and dual-port NICs.
        let active = active_ports(n).len();
        if active == 0 {
            continue;
        }
        devices.push(PciDevice::Nic {
            slot,
            ports: active.min(2) as u8,
            path: n.pci.as_ref().expect("partitioned").0.clone(),
        });
    }
    let pairs = match Topology::from_pci(&devices).map(|t| pair(&t)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Err(format!("cannot pair: {e}")),
        Err(e) => return Err(format!("cannot place the devices on PCI: {e}")),
    };
    Ok(Paired {
        gpus,
        nics: placed,
        slots,
        pairs,
    })
}

fn active_ports(n: &Nic) -> Vec<&PortInfo> {
    n.ports.iter().filter(|p| p.active).collect()
}

/// One port the mlx5 handler opens: the verbs device, the port's number and
/// the GID it sends from (`None`: InfiniBand without a listed GID, GID 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortChoice {
    /// Verbs device name (`mlx5_0`).
    pub device: String,
    /// Port number, from 1.
    pub port: u8,
    /// GID index and GID.
    pub gid: Option<(u8, [u8; 16])>,
}

/// The GID a port sends from: on RoCE a RoCE v2 IPv4-mapped one, else any
/// RoCE v2, else the first; on InfiniBand the first. (net-ib's `choose_gid`
/// has the same rule but lives in a crate this one cannot depend on.)
fn gid_of(p: &PortInfo) -> Option<(u8, [u8; 16])> {
    let v4 = |g: &&GidEntry| g.gid[..10] == [0; 10] && g.gid[10..12] == [0xff, 0xff];
    let v2 = |g: &&GidEntry| g.kind == GidKind::RoceV2;
    let g = if p.link_layer == LinkLayer::InfiniBand {
        p.gids.first()
    } else {
        p.gids
            .iter()
            .filter(v2)
            .find(v4)
            .or_else(|| p.gids.iter().find(v2))
            .or_else(|| p.gids.first())
    };
    g.map(|g| (g.index, g.gid))
}

/// The primary and backup ports the pairing gives the GPU with bus id
/// `own`, or why the mlx5 handler has none.
pub fn ports_for(sysfs: &Sysfs, own: &str) -> Result<[PortChoice; 2], String> {
    let p = paired(sysfs)?;
    let gpu = p.gpus.iter().position(|g| g.bdf == own).ok_or_else(|| {
        format!(
            "this rank's GPU {own} is not under {}",
            sysfs.root().display()
        )
    })?;
    let pr = p
        .pairs
        .iter()
        .find(|x| x.gpu as usize == gpu)
        .ok_or_else(|| format!("the pairing has no entry for GPU {own}"))?;
    let choice = |slot: u32, port: u8| -> Result<PortChoice, String> {
        let i = p
            .slots
            .iter()
            .position(|&s| s == slot)
            .ok_or("unknown NIC slot")?;
        let nic = &p.nics[i];
        // The pairing counts active ports; the k-th is the one it means.
        let info = active_ports(nic)
            .get(usize::from(port.max(1)) - 1)
            .copied()
            .ok_or_else(|| format!("{} has no active port {port}", nic.name))?;
        Ok(PortChoice {
            device: nic.name.clone(),
            port: info.port,
            gid: gid_of(info),
        })
    };
    let primary = choice(pr.primary.slot, pr.primary.port)?;
    let Some((b, _)) = pr.backup else {
        return Err(format!(
            "no backup port for GPU {own} (one single-port NIC, {}:{}): the mlx5 handler needs two paths",
            primary.device, primary.port
        ));
    };
    Ok([primary, choice(b.slot, b.port)?])
}

/// One line on this host's pairing for the GPU with bus id `own` (all GPUs
/// when `None` or not found), or why there is none.
pub fn describe(sysfs: &Sysfs, own: Option<&str>) -> String {
    let root = sysfs.root().display();
    let Paired {
        gpus,
        nics: placed,
        slots,
        pairs,
    } = match paired(sysfs) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let names: Vec<&str> = placed.iter().map(|n| n.name.as_str()).collect();
    let name = |slot: u32| {
        slots
            .iter()
            .position(|&s| s == slot)
            .map_or("?", |i| names[i])
    };
    let mine = own.and_then(|b| gpus.iter().position(|g| g.bdf == b));
    let missing = match (own, mine) {
        (Some(b), None) => format!(" (this rank's GPU {b} is not among them: all listed)"),
        _ => String::new(),
    };
    let lines: Vec<String> = pairs
        .iter()
        .filter(|p| mine.is_none_or(|m| p.gpu as usize == m))
        .map(|p| {
            let backup = match p.backup {
                Some((b, rule)) => {
                    let why = match rule {
                        BackupRule::OtherPort => "its other port",
                        BackupRule::AdjacentNic => "the adjacent NIC",
                        BackupRule::ClosestOther => "the closest other NIC",
                    };
                    format!("backup {} port {} ({why})", name(b.slot), b.port)
                }
                None => "no backup (one single-port NIC)".to_string(),
            };
            format!(
                "host GPU {} ({}): primary {} port {} ({} PCI hops), {backup}",
                p.gpu,
                gpus[p.gpu as usize].bdf,
                name(p.primary.slot),
                p.primary.port,
                p.primary_hops
            )
        })
        .collect();
    format!(
        "{} GPUs and {} NICs in {root}{missing}; {}",
        gpus.len(),
        placed.len(),
        lines.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};

    /// A sysfs tree in a temporary directory, removed on drop.
    struct Tree(PathBuf);

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{s}\n")).unwrap();
    }

    impl Tree {
        /// GPU 0 with mlx5_0 behind one switch, GPU 1 with mlx5_1 behind
        /// another (on the other root complex), single-port NICs.
        fn two_switches_each_with_a_gpu_and_a_nic(&self) {
            let sw0 = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"];
            let sw1 = ["pci0000:80", "0000:80:01.0", "0000:81:00.0"];
            self.gpu(&[sw0[0], sw0[1], sw0[2], "0000:02:00.0"]);
            self.nic("mlx5_0", &[sw0[0], sw0[1], sw0[2], "0000:03:00.0"], 1);
            self.gpu(&[sw1[0], sw1[1], sw1[2], "0000:82:00.0"]);
            self.nic("mlx5_1", &[sw1[0], sw1[1], sw1[2], "0000:83:00.0"], 1);
        }

        fn new(tag: &str) -> Tree {
            let root =
                std::env::temp_dir().join(format!("fx-ibgda-sysfs-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).unwrap();
            Tree(root)
        }

        /// A PCI function at `chain` (root complex first), listed under
        /// bus/pci/devices.
        fn function(&self, chain: &[&str], vendor: &str, class: &str) -> PathBuf {
            let dev = chain.iter().fold(self.0.join("devices"), |p, c| p.join(c));
            write(&dev.join("vendor"), vendor);
            write(&dev.join("class"), class);
            let bus = self.0.join("bus/pci/devices");
            fs::create_dir_all(&bus).unwrap();
            symlink(&dev, bus.join(chain.last().unwrap())).unwrap();
            dev
        }

        fn gpu(&self, chain: &[&str]) {
            self.function(chain, "0x10de", "0x030200");
        }

        fn nic(&self, name: &str, chain: &[&str], ports: u8) {
            let dev = self.function(chain, "0x15b3", "0x020700");
            let ib = self.0.join("class/infiniband").join(name);
            fs::create_dir_all(&ib).unwrap();
            symlink(&dev, ib.join("device")).unwrap();
            for p in 1..=ports {
                write(&ib.join(format!("ports/{p}/state")), "4: ACTIVE");
            }
        }
    }

    #[test]
    fn two_gpus_each_behind_a_switch_with_its_nic() {
        let t = Tree::new("pairs");
        t.two_switches_each_with_a_gpu_and_a_nic();
        let s = Sysfs::new(&t.0);
        let all = describe(&s, None);
        assert!(all.starts_with("2 GPUs and 2 NICs in "), "{all}");
        assert!(
            all.contains(
                "host GPU 0 (0000:02:00.0): primary mlx5_0 port 1 (2 PCI hops), backup mlx5_1 port 1 (the adjacent NIC)"
            ),
            "{all}"
        );
        assert!(
            all.contains(
                "host GPU 1 (0000:82:00.0): primary mlx5_1 port 1 (2 PCI hops), backup mlx5_0 port 1"
            ),
            "{all}"
        );
        // One GPU's line only; an unknown own GPU is said, and all are listed.
        let one = describe(&s, Some("0000:82:00.0"));
        assert!(
            one.contains("host GPU 1 (0000:82:00.0)") && !one.contains("GPU 0"),
            "{one}"
        );
        let lost = describe(&s, Some("0001:00:00.0"));
        assert!(
            lost.contains("(this rank's GPU 0001:00:00.0 is not among them: all listed)")
                && lost.contains("host GPU 0")
                && lost.contains("host GPU 1"),
            "{lost}"
        );
    }

    #[test]
    fn a_dual_port_nic_backs_up_on_its_other_port() {
        let t = Tree::new("dual");
        let sw = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"];
        t.gpu(&[sw[0], sw[1], sw[2], "0000:02:00.0"]);
        t.nic("mlx5_0", &[sw[0], sw[1], sw[2], "0000:03:00.0"], 2);
        let d = describe(&Sysfs::new(&t.0), None);
        assert!(
            d.contains("primary mlx5_0 port 1 (2 PCI hops), backup mlx5_0 port 2 (its other port)"),
            "{d}"
        );
        // Its second port down: a single-port NIC, no backup.
        write(
            &t.0.join("class/infiniband/mlx5_0/ports/2/state"),
            "1: DOWN",
        );
        let d = describe(&Sysfs::new(&t.0), None);
        assert!(d.contains("no backup (one single-port NIC)"), "{d}");
    }

    #[test]
    fn no_nics_or_no_sysfs_says_so() {
        let t = Tree::new("none");
        t.gpu(&["pci0000:00", "0000:00:01.0", "0000:02:00.0"]);
        let d = describe(&Sysfs::new(&t.0), None);
        assert!(d.starts_with("no RDMA NIC under "), "{d}");
        assert!(d.ends_with("/class/infiniband: nothing to pair"), "{d}");
        // A NIC on no PCI device (soft-RoCE's rxe).
        fs::create_dir_all(t.0.join("class/infiniband/rxe0/ports/1")).unwrap();
        let d = describe(&Sysfs::new(&t.0), None);
        assert!(
            d.contains("1 RDMA device(s)") && d.contains("none on PCI"),
            "{d}"
        );
        // NICs but no GPU: nothing to report per GPU, no error.
        let n = Tree::new("nogpu");
        n.nic("mlx5_0", &["pci0000:00", "0000:00:01.0", "0000:03:00.0"], 1);
        let d = describe(&Sysfs::new(&n.0), None);
        assert!(d.starts_with("0 GPUs and 1 NICs in "), "{d}");
    }

    /// The ports the mlx5 handler opens: the pairing's primary and backup
    /// for this rank's GPU, the GID it sends from, or why none.
    #[test]
    fn the_mlx5_handler_gets_this_gpu_s_two_ports_or_the_reason() {
        let t = Tree::new("ports");
        t.two_switches_each_with_a_gpu_and_a_nic();
        // mlx5_1 is RoCE: a link-local v1 GID, then an IPv4-mapped v2 one.
        let p = t.0.join("class/infiniband/mlx5_1/ports/1");
        write(&p.join("link_layer"), "Ethernet");
        write(&p.join("gids/0"), "fe80:0000:0000:0000:0000:0000:0000:0001");
        write(&p.join("gid_attrs/types/0"), "IB/RoCE v1");
        write(&p.join("gids/1"), "0000:0000:0000:0000:0000:ffff:0a00:0001");
        write(&p.join("gid_attrs/types/1"), "RoCE v2");
        let s = Sysfs::new(&t.0);
        let [a, b] = ports_for(&s, "0000:82:00.0").unwrap();
        assert_eq!((a.device.as_str(), a.port), ("mlx5_1", 1));
        let mut v4 = [0u8; 16];
        v4[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        assert_eq!(a.gid, Some((1, v4)));
        assert_eq!((b.device.as_str(), b.port), ("mlx5_0", 1));
        let e = ports_for(&s, "0000:99:00.0").unwrap_err();
        assert!(
            e.starts_with("this rank's GPU 0000:99:00.0 is not under "),
            "{e}"
        );

        // One single-port NIC: no backup, so no mlx5 handler.
        let sw0 = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"];
        let one = Tree::new("ports1");
        one.gpu(&[sw0[0], sw0[1], sw0[2], "0000:02:00.0"]);
        one.nic("mlx5_0", &[sw0[0], sw0[1], sw0[2], "0000:03:00.0"], 2);
        write(
            &one.0.join("class/infiniband/mlx5_0/ports/1/state"),
            "1: DOWN",
        );
        let e = ports_for(&Sysfs::new(&one.0), "0000:02:00.0").unwrap_err();
        // Its first port down: the one active port is port 2.
        assert!(
            e.starts_with("no backup port for GPU 0000:02:00.0 (one single-port NIC, mlx5_0:2)"),
            "{e}"
        );
        let none = Tree::new("ports0");
        none.gpu(&[sw0[0], sw0[1], "0000:02:00.0"]);
        let e = ports_for(&Sysfs::new(&none.0), "0000:02:00.0").unwrap_err();
        assert!(e.starts_with("no RDMA NIC under "), "{e}");
    }
}
