//! What ranks tell each other in `comm_init` (two out-of-band all_gathers)
//! and how they decide alike.
//!
//! 1. **Hello**: whether this rank could set up (CUDA, its device, the driver
//!    entry points, every peer GPU reachable, its flag buffer), the knobs that
//!    must agree (`FERROCX_CE_PRIORITY`, `_BATCH`, `_BATCH_BYTES`, `_LL_BYTES`,
//!    `_LL128_BYTES`, `_SIMPLE_BYTES`, `_SIMPLE_SLOT`, `_SIMPLE_CHUNK`, `_P2P_BYTES`,
//!    `_P2P_LL_BYTES`) and its flag
//!    buffer's IPC handle. Every rank takes part even when its own setup
//!    failed, so nobody waits for a rank that returned early; then all ranks
//!    see the same list and all decide the same ([`agree`]).
//! 2. **Opened**: whether this rank opened every peer's flags (and started its
//!    watchdog). Again all decide alike: if one rank failed, every rank sits
//!    the communicator out.
//!
//! Only plain bytes cross: little-endian integers, the 64-byte handle and a
//! truncated UTF-8 reason.

use crate::config::Config;
use ferrocx_sdk::device::{IpcHandle, HANDLE_BYTES};

const MAGIC: u32 = 0x4345_0006;
/// Bytes of the reason text carried.
const REASON_BYTES: usize = 160;
/// Bytes of an encoded [`Hello`].
pub const HELLO_BYTES: usize =
    4 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + HANDLE_BYTES + REASON_BYTES;

/// One rank's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// `None` when the rank is ready; why not otherwise.
    pub failed: Option<String>,
    /// `FERROCX_CE_PRIORITY`.
    pub priority: i32,
    /// `FERROCX_CE_BATCH`.
    pub batch: u64,
    /// `FERROCX_CE_BATCH_BYTES`.
    pub batch_bytes: u64,
    /// `FERROCX_CE_LL_BYTES` (it sizes the LL areas of every rank's flags).
    pub ll_bytes: u32,
    /// `FERROCX_CE_SIMPLE_BYTES` (which calls take the Simple kernel).
    pub simple_bytes: u64,
    /// `FERROCX_CE_SIMPLE_SLOT` (it sizes the Simple and point-to-point rings).
    pub simple_slot: u64,
    /// `FERROCX_CE_SIMPLE_CHUNK` (how every rank cuts a segment into chunks).
    pub simple_chunk: u64,
    /// `FERROCX_CE_P2P_BYTES` (which sends and receives take the kernel).
    pub p2p_bytes: u64,
    /// `FERROCX_CE_P2P_LL_BYTES` (which of those go as lines; it sizes the line rings).
    pub p2p_ll_bytes: u64,
    /// `FERROCX_CE_LL128_BYTES` (which calls take the LL128 kernel; it sizes
    /// its areas).
    pub ll128_bytes: u64,
    /// The rank's flag buffer (NONE when it has none).
    pub handle: IpcHandle,
}

impl Hello {
    /// A ready rank's hello.
    pub fn ready(cfg: &Config, handle: IpcHandle) -> Self {
        Hello {
            failed: None,
            priority: cfg.priority,
            batch: cfg.batch as u64,
            batch_bytes: cfg.batch_bytes as u64,
            ll_bytes: u32::try_from(cfg.ll_bytes).unwrap_or(u32::MAX),
            simple_bytes: cfg.simple_bytes as u64,
            // Agreed only where the kernel may run: with it off everywhere, the
            // slot sizes nothing.
            simple_slot: if cfg.simple_bytes > 0 || cfg.p2p_bytes > 0 {
                cfg.simple_slot as u64
            } else {
                0
            },
            // Agreed only where the Simple kernel may run.
            simple_chunk: if cfg.simple_bytes > 0 {
                cfg.simple_chunk as u64
            } else {
                0
            },
            p2p_bytes: cfg.p2p_bytes as u64,
            // What sizes the line rings: nothing where the kernel never runs.
            p2p_ll_bytes: cfg.p2p_lines_limit() as u64,
            ll128_bytes: cfg.ll128_bytes as u64,
            handle,
        }
    }

    /// A rank that could not set up.
    pub fn failed(cfg: &Config, why: impl Into<String>) -> Self {
        Hello {
            failed: Some(why.into()),
            ..Hello::ready(cfg, IpcHandle::NONE)
        }
    }

    /// Plain bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_BYTES);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&(self.failed.is_none() as u32).to_le_bytes());
        b.extend_from_slice(&self.priority.to_le_bytes());
        b.extend_from_slice(&self.ll_bytes.to_le_bytes());
        b.extend_from_slice(&self.batch.to_le_bytes());
        b.extend_from_slice(&self.batch_bytes.to_le_bytes());
        b.extend_from_slice(&self.simple_bytes.to_le_bytes());
        b.extend_from_slice(&self.simple_slot.to_le_bytes());
        b.extend_from_slice(&self.p2p_bytes.to_le_bytes());
        b.extend_from_slice(&self.p2p_ll_bytes.to_le_bytes());
        b.extend_from_slice(&self.ll128_bytes.to_le_bytes());
        b.extend_from_slice(&self.simple_chunk.to_le_bytes());
        b.extend_from_slice(&self.handle.0);
        let mut reason = [0u8; REASON_BYTES];
        if let Some(why) = &self.failed {
            // Cut at a character boundary, leaving room for the NUL.
            let mut end = why.len().min(REASON_BYTES - 1);
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            reason[..end].copy_from_slice(&why.as_bytes()[..end]);
        }
        b.extend_from_slice(&reason);
        debug_assert_eq!(b.len(), HELLO_BYTES);
        b
    }

    /// Inverse of [`encode`](Self::encode).
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() != HELLO_BYTES {
            return Err(format!("{} bytes, expected {HELLO_BYTES}", b.len()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err(format!("bad magic {:#x}", u32_at(0)));
        }
        let mut handle = [0u8; HANDLE_BYTES];
        handle.copy_from_slice(&b[80..80 + HANDLE_BYTES]);
        let text = &b[80 + HANDLE_BYTES..];
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        Ok(Hello {
            failed: (u32_at(4) == 0).then(|| String::from_utf8_lossy(&text[..end]).into_owned()),
            priority: u32_at(8) as i32,
            batch: u64_at(16),
            batch_bytes: u64_at(24),
            ll_bytes: u32_at(12),
            simple_bytes: u64_at(32),
            simple_slot: u64_at(40),
            p2p_bytes: u64_at(48),
            p2p_ll_bytes: u64_at(56),
            ll128_bytes: u64_at(64),
            simple_chunk: u64_at(72),
            handle: IpcHandle(handle),
        })
    }
}

/// Decode every rank's hello (rank order).
pub fn decode_all(all: &[Vec<u8>]) -> Result<Vec<Hello>, String> {
    all.iter()
        .enumerate()
        .map(|(r, b)| Hello::decode(b).map_err(|e| format!("rank {r}'s ce hello: {e}")))
        .collect()
}

/// Whether every rank can go on, or why not (naming the ranks); the same
/// answer on every rank, since every rank decides from the same list.
pub fn agree(all: &[Hello]) -> Result<(), String> {
    let failed: Vec<String> = all
        .iter()
        .enumerate()
        .filter_map(|(r, h)| h.failed.as_ref().map(|why| format!("rank {r}: {why}")))
        .collect();
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    let Some(first) = all.first() else {
        return Ok(());
    };
    type Knob = (&'static str, fn(&Hello) -> u64);
    let knobs: [Knob; 10] = [
        ("FERROCX_CE_PRIORITY", |h| h.priority as u64),
        ("FERROCX_CE_BATCH", |h| h.batch),
        ("FERROCX_CE_BATCH_BYTES", |h| h.batch_bytes),
        ("FERROCX_CE_LL_BYTES", |h| h.ll_bytes as u64),
        ("FERROCX_CE_SIMPLE_BYTES", |h| h.simple_bytes),
        ("FERROCX_CE_SIMPLE_SLOT", |h| h.simple_slot),
        ("FERROCX_CE_SIMPLE_CHUNK", |h| h.simple_chunk),
        ("FERROCX_CE_P2P_BYTES", |h| h.p2p_bytes),
        ("FERROCX_CE_P2P_LL_BYTES", |h| h.p2p_ll_bytes),
        ("FERROCX_CE_LL128_BYTES", |h| h.ll128_bytes),
    ];
    for (var, get) in knobs {
        if let Some((r, h)) = all.iter().enumerate().find(|(_, h)| get(h) != get(first)) {
            return Err(format!(
                "{var} differs between ranks (rank 0: {}, rank {r}: {}): every rank must use the same value",
                get(first),
                get(h)
            ));
        }
    }
    Ok(())
}

/// The most ranks that share one GPU (same host, same PCI address), over
/// every GPU of the communicator: the same number on every rank, since every
/// rank knows every peer. Their waiting kernels run at once, so each takes
/// that share of one wave (`Kernels::with_share`).
pub fn ranks_per_gpu(peers: &[ferrocx_sdk::abi::FxPeerInfo]) -> u32 {
    peers
        .iter()
        .filter(|p| p.cuda_pci >= 0)
        .map(|p| {
            peers
                .iter()
                .filter(|q| q.host_hash == p.host_hash && q.cuda_pci == p.cuda_pci)
                .count() as u32
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The largest block the LL128 areas of every rank's flag buffer hold at
/// these ranks with `cfg` (0: no areas): from what every rank knows alike —
/// the variables (agreed by the hello) and every rank's GPU — so every rank
/// lays its buffer out the same. None where the kernel can never run: the
/// reductions off, one rank or more than the kernels take, a rank without a
/// GPU or two on one, or a range that is empty.
pub fn ll128_region(cfg: &Config, peers: &[ferrocx_sdk::abi::FxPeerInfo]) -> usize {
    let n = peers.len();
    if !cfg.reduce || !(2..=ferrocx_sdk::kernels::ll::MAX_RANKS).contains(&n) || !own_gpus(peers) {
        return 0;
    }
    crate::select::ll128_most(n, cfg.ll128_bytes, cfg.ll_bytes)
}

/// Whether every rank has a GPU and no two share one.
fn own_gpus(peers: &[ferrocx_sdk::abi::FxPeerInfo]) -> bool {
    peers.iter().all(|p| p.cuda_pci >= 0) && ranks_per_gpu(peers) == 1
}

/// Whether this rank may run the LL128 kernel
/// ([`ferrocx_sdk::kernels::ll128`]): every rank on a GPU of its own, and
/// this rank's GPU joined to every peer's by NVLink (native peer atomics).
pub fn nvlink_to_every_peer(info: &ferrocx_sdk::collective::CommInfo) -> bool {
    own_gpus_and_links(
        &info.peers,
        info.rank,
        ferrocx_sdk::cuda::native_peer_atomics,
    )
}

/// [`nvlink_to_every_peer`] with `linked` saying whether two GPUs (by PCI
/// location) are joined by NVLink.
pub fn own_gpus_and_links(
    peers: &[ferrocx_sdk::abi::FxPeerInfo],
    me: usize,
    linked: impl Fn(i32, i32) -> bool,
) -> bool {
    let Some(mine) = peers.get(me) else {
        return false;
    };
    own_gpus(peers)
        && peers
            .iter()
            .enumerate()
            .all(|(r, p)| r == me || linked(mine.cuda_pci, p.cuda_pci))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_per_gpu_counts_the_most_crowded_gpu_of_any_host() {
        use ferrocx_sdk::abi::FxPeerInfo;
        let rank = |host: u64, pci: i32| {
            let mut p = FxPeerInfo::zeroed();
            p.host_hash = host;
            p.cuda_pci = pci;
            p
        };
        // One GPU per rank, on two hosts whose GPUs have the same addresses.
        assert_eq!(ranks_per_gpu(&[rank(1, 0x100), rank(2, 0x100)]), 1);
        // Four ranks on one GPU (the MPS case), or two on each of two.
        assert_eq!(ranks_per_gpu(&[rank(1, 0x100); 4]), 4);
        let two_by_two = [
            rank(1, 0x100),
            rank(1, 0x100),
            rank(1, 0x200),
            rank(1, 0x200),
        ];
        assert_eq!(ranks_per_gpu(&two_by_two), 2);
        // Uneven: the most crowded GPU decides, alike on every rank.
        assert_eq!(
            ranks_per_gpu(&[
                rank(1, 0x100),
                rank(1, 0x200),
                rank(1, 0x200),
                rank(1, 0x200)
            ]),
            3
        );
        // Ranks without a GPU do not count; none at all is 1.
        assert_eq!(ranks_per_gpu(&[rank(1, -1), rank(1, -1)]), 1);
        assert_eq!(ranks_per_gpu(&[]), 1);
    }

    #[test]
    fn ll128_needs_a_gpu_per_rank_and_nvlink_to_every_peer() {
        use ferrocx_sdk::abi::FxPeerInfo;
        let rank = |pci: i32| {
            let mut p = FxPeerInfo::zeroed();
            p.host_hash = 1;
            p.cuda_pci = pci;
            p
        };
        let four = [rank(0x100), rank(0x200), rank(0x300), rank(0x400)];
        let all = |_: i32, _: i32| true;
        assert!(own_gpus_and_links(&four, 2, all));
        // The areas: from the variables and the GPUs alone.
        let cfg = Config::default();
        assert_eq!(ll128_region(&cfg, &four), 1 << 20);
        assert_eq!(ll128_region(&cfg, &four[..2]), 4 << 20);
        assert_eq!(ll128_region(&cfg, &four[..1]), 0);
        let shared4 = [rank(0x100), rank(0x100), rank(0x200), rank(0x300)];
        assert_eq!(ll128_region(&cfg, &shared4), 0);
        let off = Config {
            reduce: false,
            ..Config::default()
        };
        assert_eq!(ll128_region(&off, &four), 0);
        // A number no larger than the LL limit leaves no range.
        let empty = Config {
            ll128_bytes: 1 << 20,
            ..Config::default()
        };
        assert_eq!(ll128_region(&empty, &four), 0);
        let forced = Config {
            ll128_bytes: 2 << 20,
            ..Config::default()
        };
        assert_eq!(ll128_region(&forced, &four), 2 << 20);
        assert_eq!(
            ll128_region(
                &Config {
                    ll128_bytes: 0,
                    ..forced
                },
                &four
            ),
            0
        );
        // One pair without NVLink: the ranks on it say no (and so all agree no).
        let no_1_3 = |a: i32, b: i32| !matches!((a, b), (0x200, 0x400) | (0x400, 0x200));
        assert!(!own_gpus_and_links(&four, 1, no_1_3));
        assert!(!own_gpus_and_links(&four, 3, no_1_3));
        assert!(own_gpus_and_links(&four, 0, no_1_3));
        // A shared GPU, a rank without one, a rank out of range: no.
        let shared = [rank(0x100), rank(0x100), rank(0x200)];
        assert!(!own_gpus_and_links(&shared, 2, all));
        assert!(!own_gpus_and_links(&[rank(0x100), rank(-1)], 0, all));
        assert!(!own_gpus_and_links(&four, 4, all));
        // It asks only about its own pairs.
        let asked = std::cell::RefCell::new(Vec::new());
        own_gpus_and_links(&four, 0, |a, b| {
            asked.borrow_mut().push((a, b));
            true
        });
        assert_eq!(
            asked.into_inner(),
            [(0x100, 0x200), (0x100, 0x300), (0x100, 0x400)]
        );
    }

    #[test]
    fn hellos_round_trip_and_cut_long_reasons() {
        let cfg = Config::default();
        let h = Hello::ready(&cfg, IpcHandle([7; HANDLE_BYTES]));
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let long = "é".repeat(200);
        let f = Hello::failed(&cfg, long.clone());
        let back = Hello::decode(&f.encode()).unwrap();
        let why = back.failed.unwrap();
        assert!(
            long.starts_with(&why) && why.len() >= REASON_BYTES - 2,
            "{why}"
        );
        assert!(Hello::decode(&[0; 3]).is_err());
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(Hello::decode(&bad).unwrap_err().contains("magic"));
        let all = vec![h.encode(), bad];
        assert!(decode_all(&all).unwrap_err().starts_with("rank 1"));
    }

    #[test]
    fn every_rank_decides_alike_and_names_who_failed() {
        let cfg = Config::default();
        let ok = Hello::ready(&cfg, IpcHandle::NONE);
        assert_eq!(agree(&[ok.clone(), ok.clone()]), Ok(()));
        let err = agree(&[
            ok.clone(),
            Hello::failed(&cfg, "no GPU"),
            Hello::failed(&cfg, "cuIpcOpenMemHandle failed"),
        ])
        .unwrap_err();
        assert_eq!(err, "rank 1: no GPU; rank 2: cuIpcOpenMemHandle failed");
        let ll = Hello::ready(
            &Config {
                ll_bytes: 4096,
                ..cfg
            },
            IpcHandle::NONE,
        );
        let err = agree(&[ok.clone(), ll]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_LL_BYTES differs"), "{err}");
        // It sizes the LL128 areas, so the scratch after them: a difference
        // would put a peer's scratch elsewhere.
        let l8 = Hello::ready(
            &Config {
                ll128_bytes: 2 << 20,
                ..cfg
            },
            IpcHandle::NONE,
        );
        let err = agree(&[ok.clone(), l8]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_LL128_BYTES differs"), "{err}");
        let slot = Hello::ready(
            &Config {
                simple_slot: 4096,
                ..cfg
            },
            IpcHandle::NONE,
        );
        let err = agree(&[ok.clone(), slot]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_SIMPLE_SLOT differs"), "{err}");
        // The chunk decides where every chunk of a segment starts.
        let chunk = Hello::ready(
            &Config {
                simple_chunk: 128 << 10,
                ..cfg
            },
            IpcHandle::NONE,
        );
        assert_eq!(Hello::decode(&chunk.encode()).unwrap(), chunk);
        let err = agree(&[ok.clone(), chunk]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_SIMPLE_CHUNK differs"), "{err}");
        // With both ring kernels off everywhere the slot is not compared.
        let off = |slot| {
            Hello::ready(
                &Config {
                    simple_bytes: 0,
                    p2p_bytes: 0,
                    simple_slot: slot,
                    ..cfg
                },
                IpcHandle::NONE,
            )
        };
        assert_eq!(agree(&[off(4096), off(65536)]), Ok(()));
        let p2p = Hello::ready(
            &Config {
                p2p_bytes: 1 << 20,
                ..cfg
            },
            IpcHandle::NONE,
        );
        let err = agree(&[ok.clone(), p2p]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_P2P_BYTES differs"), "{err}");
        let lines = Hello::ready(
            &Config {
                p2p_ll_bytes: 4096,
                ..cfg
            },
            IpcHandle::NONE,
        );
        let err = agree(&[ok.clone(), lines]).unwrap_err();
        assert!(err.starts_with("FERROCX_CE_P2P_LL_BYTES differs"), "{err}");
        // With the point-to-point kernel off everywhere the line limit sizes
        // nothing and is not compared.
        let no_p2p = |ll| {
            Hello::ready(
                &Config {
                    p2p_bytes: 0,
                    p2p_ll_bytes: ll,
                    ..cfg
                },
                IpcHandle::NONE,
            )
        };
        assert_eq!(agree(&[no_p2p(4096), no_p2p(1 << 20)]), Ok(()));
        let other = Hello::ready(&Config { batch: 4, ..cfg }, IpcHandle::NONE);
        let err = agree(&[ok.clone(), ok, other]).unwrap_err();
        assert!(
            err.starts_with("FERROCX_CE_BATCH differs") && err.contains("rank 2: 4"),
            "{err}"
        );
        assert_eq!(agree(&[]), Ok(()));
    }
}
