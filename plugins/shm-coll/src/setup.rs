//! What ranks tell each other in `comm_init` and how they decide alike
//! (sans-IO: encoding and the decision).
//!
//! 1. **Hello**: whether this rank could set up (one host, its region
//!    created), its tunables and its region's name. Every rank takes part even
//!    when its own setup failed, so nobody waits for a rank that returned
//!    early; all see the same list and decide the same ([`agree`]): the
//!    smallest priority, slot size and ring depths, or sit the communicator out naming the
//!    rank and why.
//! 2. **Opened**: whether this rank mapped every peer's region. If one did
//!    not, every rank sits out.

use crate::config::Check;
use crate::cpus::{CpuSet, CPUSET_BYTES};

/// Bytes of a region name carried.
pub const NAME_BYTES: usize = 96;
/// Bytes of a reason carried.
pub const REASON_BYTES: usize = 160;
/// Bytes of an encoded [`Hello`].
pub const HELLO_BYTES: usize =
    4 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + NAME_BYTES + REASON_BYTES + CPUSET_BYTES;
/// Bytes of an encoded [`opened`] status.
pub const OPENED_BYTES: usize = 4 + REASON_BYTES;

/// One rank's hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// `None` when ready; why not otherwise.
    pub failed: Option<String>,
    /// `FERROCX_SHM_COLL_PRIORITY`.
    pub priority: i32,
    /// `FERROCX_SHM_COLL_BYTES` (the size its region was made for).
    pub bytes: u64,
    /// The largest block it bids for at this rank count (`FERROCX_SHM_COLL_MAX_BYTES`).
    pub max_block: u64,
    /// `FERROCX_SHM_COLL_MAX_RANKS`.
    pub max_ranks: u64,
    /// The largest point-to-point message its region was made for (0: none).
    pub p2p_bytes: u64,
    /// Collective slots per pair its region was made for.
    pub depth: u64,
    /// Collective heads per pair its region was made for.
    pub heads: u64,
    /// `FERROCX_CHECK_CALLS`.
    pub check: Check,
    /// Its region's name.
    pub name: String,
    /// The CPUs it may run on (empty: unknown).
    pub cpus: CpuSet,
}

/// What every rank decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    /// The bid.
    pub priority: i32,
    /// The slot size every rank lays out.
    pub bytes: usize,
    /// The largest block bid for (at least a slot).
    pub max_block: usize,
    /// The largest point-to-point message taken (0: none).
    pub p2p_bytes: usize,
    /// Collective slots per pair (2 when calls are checked synchronously).
    pub depth: usize,
    /// Collective heads per pair (2 when calls are checked synchronously; at
    /// least `depth`).
    pub heads: usize,
    /// How calls are checked: the strictest of any rank (with one rank
    /// checking synchronously every pair exchanges in every call, which the
    /// others must do too).
    pub check: Check,
}

fn put_text(b: &mut Vec<u8>, text: &str, len: usize) {
    let mut field = vec![0u8; len];
    // Cut at a character boundary, leaving room for the NUL.
    let mut end = text.len().min(len - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
    b.extend_from_slice(&field);
}

fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn word<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("length checked")
}

impl Hello {
    /// Plain bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_BYTES);
        let check = match self.check {
            Check::Off => 0,
            Check::Sync => 1,
            Check::Deferred => 2,
        };
        let flags = self.failed.is_none() as u32 | check << 1;
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.priority.to_le_bytes());
        b.extend_from_slice(&self.bytes.to_le_bytes());
        b.extend_from_slice(&self.max_block.to_le_bytes());
        b.extend_from_slice(&self.max_ranks.to_le_bytes());
        b.extend_from_slice(&self.p2p_bytes.to_le_bytes());
        b.extend_from_slice(&self.depth.to_le_bytes());
        b.extend_from_slice(&self.heads.to_le_bytes());
        put_text(&mut b, &self.name, NAME_BYTES);
        put_text(&mut b, self.failed.as_deref().unwrap_or(""), REASON_BYTES);
        b.extend_from_slice(&self.cpus.encode());
        b
    }

    /// From [`encode`](Self::encode)'s bytes.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != HELLO_BYTES {
            return None;
        }
        let flags = u32::from_le_bytes(word(b, 0));
        let ok = flags & 1 == 1;
        let reason = text(&b[56 + NAME_BYTES..56 + NAME_BYTES + REASON_BYTES]);
        Some(Hello {
            failed: (!ok).then_some(reason),
            priority: i32::from_le_bytes(word(b, 4)),
            bytes: u64::from_le_bytes(word(b, 8)),
            max_block: u64::from_le_bytes(word(b, 16)),
            max_ranks: u64::from_le_bytes(word(b, 24)),
            p2p_bytes: u64::from_le_bytes(word(b, 32)),
            depth: u64::from_le_bytes(word(b, 40)),
            heads: u64::from_le_bytes(word(b, 48)),
            check: match flags >> 1 & 3 {
                0 => Check::Off,
                2 => Check::Deferred,
                _ => Check::Sync,
            },
            name: text(&b[56..56 + NAME_BYTES]),
            cpus: CpuSet::decode(&b[HELLO_BYTES - CPUSET_BYTES..]),
        })
    }
}

/// Every rank's hellos (in rank order) → what all ranks use, or why all sit out.
pub fn agree(hellos: &[Option<Hello>]) -> Result<Agreed, String> {
    let n = hellos.len();
    let mut priority = i32::MAX;
    let mut bytes = u64::MAX;
    let mut max_block = u64::MAX;
    let mut p2p_bytes = u64::MAX;
    let mut depth = u64::MAX;
    let mut heads = u64::MAX;
    let mut check = Check::Off;
    for (r, h) in hellos.iter().enumerate() {
        let Some(h) = h else {
            return Err(format!("rank {r} sent a garbled hello"));
        };
        if let Some(why) = &h.failed {
            return Err(format!("rank {r}: {why}"));
        }
        if h.priority == 0 {
            return Err(format!("FERROCX_SHM_COLL_PRIORITY=0 on rank {r}"));
        }
        if h.bytes == 0 {
            return Err(format!("FERROCX_SHM_COLL_BYTES=0 on rank {r}"));
        }
        if (n as u64) > h.max_ranks {
            return Err(format!(
                "{n} ranks exceed FERROCX_SHM_COLL_MAX_RANKS={} on rank {r}",
                h.max_ranks
            ));
        }
        priority = priority.min(h.priority);
        bytes = bytes.min(h.bytes);
        max_block = max_block.min(h.max_block);
        p2p_bytes = p2p_bytes.min(h.p2p_bytes);
        depth = depth.min(h.depth);
        heads = heads.min(h.heads);
        check = check.max(h.check);
    }
    // Every rank's depths are powers of two; a garbled one is not used.
    let ring = |d: u64| {
        if check == Check::Sync {
            2
        } else {
            1usize << d.clamp(2, crate::layout::MAX_DEPTH as u64).ilog2()
        }
    };
    Ok(Agreed {
        priority,
        bytes: bytes as usize,
        max_block: max_block.max(bytes) as usize,
        p2p_bytes: p2p_bytes as usize,
        depth: ring(depth),
        heads: ring(heads.max(depth)),
        check,
    })
}

/// The second round's message: `None` = mapped every peer.
pub fn opened(failed: Option<&str>) -> Vec<u8> {
    let mut b = Vec::with_capacity(OPENED_BYTES);
    b.extend_from_slice(&(failed.is_none() as u32).to_le_bytes());
    put_text(&mut b, failed.unwrap_or(""), REASON_BYTES);
    b
}

/// Every rank's [`opened`] message → why all sit out, if one failed.
pub fn all_opened(msgs: &[Vec<u8>]) -> Result<(), String> {
    for (r, m) in msgs.iter().enumerate() {
        if m.len() != OPENED_BYTES {
            return Err(format!("rank {r} sent a garbled status"));
        }
        if u32::from_le_bytes(word(m, 0)) != 1 {
            return Err(format!("rank {r}: {}", text(&m[4..])));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(priority: i32, bytes: u64) -> Hello {
        Hello {
            failed: None,
            priority,
            bytes,
            max_block: 4 * bytes,
            max_ranks: 16,
            p2p_bytes: bytes / 2,
            depth: 8,
            heads: 64,
            check: Check::Off,
            name: "/ferrocx-shmcoll-12-ab-0".into(),
            cpus: CpuSet::of([3, 70]),
        }
    }

    #[test]
    fn round_trip_and_garbage() {
        let h = ready(150, 16384);
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        for check in [Check::Sync, Check::Deferred] {
            let h = Hello {
                check,
                ..ready(150, 16384)
            };
            assert_eq!(Hello::decode(&h.encode()), Some(h));
        }
        let f = Hello {
            failed: Some("é".repeat(200)),
            ..ready(1, 2)
        };
        let back = Hello::decode(&f.encode()).unwrap();
        assert!(back.failed.unwrap().len() < REASON_BYTES);
        assert_eq!(Hello::decode(&[0; 3]), None);
    }

    #[test]
    fn everyone_takes_the_smallest_or_sits_out_naming_the_rank() {
        let all = [
            Some(ready(150, 16384)),
            Some(Hello {
                depth: 4,
                ..ready(120, 4096)
            }),
            Some(ready(300, 8192)),
        ];
        assert_eq!(
            agree(&all),
            Ok(Agreed {
                priority: 120,
                bytes: 4096,
                max_block: 16384,
                p2p_bytes: 2048,
                depth: 4,
                heads: 64,
                check: Check::Off
            })
        );
        // One rank checking later makes every rank compare, the rings kept deep.
        let mut one_defers = all.clone();
        one_defers[1] = Some(Hello {
            check: Check::Deferred,
            depth: 4,
            ..ready(120, 4096)
        });
        let agreed = agree(&one_defers).unwrap();
        assert!(agreed.check == Check::Deferred && agreed.depth == 4);
        // One rank checking synchronously makes every rank exchange in every call.
        let mut one_checks = one_defers.clone();
        one_checks[2] = Some(Hello {
            check: Check::Sync,
            ..ready(300, 8192)
        });
        let agreed = agree(&one_checks).unwrap();
        assert!(agreed.check == Check::Sync && agreed.depth == 2 && agreed.heads == 2);
        // Fewer heads than slots on a garbled hello: as many heads as slots.
        let mut few_heads = all.clone();
        few_heads[0] = Some(Hello {
            heads: 2,
            ..ready(150, 16384)
        });
        assert_eq!(agree(&few_heads).unwrap().heads, 4);
        let mut bad = all.clone();
        bad[2] = Some(Hello {
            failed: Some("ranks on more than one host".into()),
            ..ready(150, 16384)
        });
        assert_eq!(
            agree(&bad),
            Err("rank 2: ranks on more than one host".into())
        );
        bad[2] = Some(ready(0, 16384));
        assert!(agree(&bad).unwrap_err().contains("PRIORITY=0 on rank 2"));
        bad[2] = Some(Hello {
            max_ranks: 2,
            ..ready(150, 16384)
        });
        assert!(agree(&bad).unwrap_err().contains("3 ranks exceed"));
        bad[1] = None;
        assert_eq!(agree(&bad), Err("rank 1 sent a garbled hello".into()));
    }

    #[test]
    fn one_rank_that_could_not_map_stops_all() {
        let ok = opened(None);
        assert_eq!(all_opened(&[ok.clone(), ok.clone()]), Ok(()));
        let bad = opened(Some("cannot map /x: ENOENT"));
        assert_eq!(
            all_opened(&[ok, bad]),
            Err("rank 1: cannot map /x: ENOENT".into())
        );
        assert!(all_opened(&[vec![1]]).is_err());
    }
}
