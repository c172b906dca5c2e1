//! Connecting the net carrier's paths in `comm_init`, collectively: every
//! rank listens on its two paths' addresses and publishes them through the
//! bootstrap's all-gather; each rank dials, on both paths, the ranks below it
//! that it reaches over the network, and accepts the ranks above it. A
//! rank that fails (no address, a dial refused, a peer missing by the
//! deadline) says so in a last all-gather, so every rank fails together,
//! naming it.
//!
//! The listeners stay open after setup (non-blocking, in [`Links`]): a path
//! whose connection breaks is dialed again by the same side, and accepted
//! by the same side, as here (`relink`).

use super::addr;
use super::conn::{self, Conn};
use super::wire::Hello;
use ferrocx_sdk::collective::Oob;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// The bootstrap's all-gather (the core's, or the tests' in-process one).
pub trait Gather {
    /// Every rank's `mine`, in rank order.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String>;
}

impl Gather for Oob {
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        Oob::all_gather(self, mine).map_err(|e| e.message().to_string())
    }
}

/// Per rank, [primary, backup] connections.
type Conns = Vec<[Option<Conn>; 2]>;
/// Per rank, where its [primary, backup] paths listen.
type Addrs = Vec<Option<[SocketAddr; 2]>>;

/// What `connect` set up.
pub struct Links {
    /// Per rank, [primary, backup]; `None` where not reached over the network.
    pub conns: Conns,
    /// Where this rank's paths listen.
    pub local: [SocketAddr; 2],
    /// This rank's listeners, [primary, backup] (non-blocking), kept for
    /// reconnects from the ranks above.
    pub listeners: [TcpListener; 2],
    /// Per rank, where its paths listen; `None` where not reached over the
    /// network.
    pub addrs: Addrs,
    /// The communicator's token, which every hello carries.
    pub token: u64,
}

/// Rank `me` of `net.len()`: connect both paths to every rank `r` with
/// `net[r]` (the same answer on every rank), listening on `local` (or
/// publishing that it cannot: `Err`), identifying the communicator by
/// `token`, everything by `timeout`.
pub fn connect(
    g: &dyn Gather,
    me: usize,
    net: &[bool],
    token: u64,
    local: Result<[SocketAddr; 2], String>,
    timeout: Duration,
) -> Result<Links, String> {
    let listening = local.and_then(|l| {
        let a = conn::listen(l[0]).map_err(|e| format!("listen on {}: {e}", l[0]))?;
        let b = conn::listen(l[1]).map_err(|e| format!("listen on {}: {e}", l[1]))?;
        Ok(([a.0, b.0], [a.1, b.1]))
    });
    let record = addr::encode(listening.as_ref().ok().map(|l| &l.1));
    let all = g.all_gather(&record)?;
    // From here: waiting for slow ranks to reach the all-gather does not eat
    // into the time to dial and accept.
    let deadline = Instant::now() + timeout;
    let mine = listening.and_then(|(listeners, at)| {
        let (conns, addrs) = links(me, net, token, &all, &listeners, deadline)?;
        Ok(Links {
            conns,
            local: at,
            listeners,
            addrs,
            token,
        })
    });
    let oks = g.all_gather(&[mine.is_ok() as u8])?;
    let mine = mine.map_err(|e| format!("rank {me}: {e}"))?;
    if let Some(r) = oks.iter().position(|v| v.first() != Some(&1)) {
        return Err(format!(
            "rank {r} could not connect its net carrier's paths (see its log)"
        ));
    }
    Ok(mine)
}

fn links(
    me: usize,
    net: &[bool],
    token: u64,
    all: &[Vec<u8>],
    listeners: &[TcpListener; 2],
    deadline: Instant,
) -> Result<(Conns, Addrs), String> {
    let n = net.len();
    let mut addrs = vec![None; n];
    for r in (0..n).filter(|&r| net[r]) {
        addrs[r] = Some(addr::decode(r, &all[r])?.ok_or_else(|| {
            format!("rank {r} could not listen for the net carrier (see its log)")
        })?);
    }
    let mut conns: Vec<[Option<Conn>; 2]> = (0..n).map(|_| [None, None]).collect();
    let wrap = |s, r: usize, p: usize| {
        Conn::new(s, u32::MAX).map_err(|e| format!("path {p} to rank {r}: {e}"))
    };
    // Dial the ranks below: their listeners exist (they published them), and
    // a connection completes in the kernel's backlog before they accept.
    for r in (0..me).filter(|&r| net[r]) {
        let at = addrs[r].expect("decoded above");
        for p in 0..2 {
            let hello = Hello {
                rank: me as u32,
                path: p as u8,
                token,
            };
            let s = conn::dial(at[p], hello, deadline)
                .map_err(|e| format!("path {p} to rank {r}: {e}"))?;
            conns[r][p] = Some(wrap(s, r, p)?);
        }
    }
    for (p, l) in listeners.iter().enumerate() {
        let mut expect: BTreeMap<u32, _> = (me + 1..n)
            .filter(|&r| net[r])
            .map(|r| (r as u32, None))
            .collect();
        conn::accept(l, token, p as u8, deadline, &mut expect)?;
        for (r, s) in expect {
            let s = s.expect("accept returns once every rank connected");
            conns[r as usize][p] = Some(wrap(s, r as usize, p)?);
        }
    }
    Ok((conns, addrs))
}
