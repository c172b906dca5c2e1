//! Rendezvous through rank 0: every rank reports its [`RankInfo`], rank 0 answers each with
//! the full table and a fresh communicator nonce.
//!
//! Rank 0 listens on the root address; other ranks connect to it (retrying while it is not
//! up yet). Each non-root rank opens its peer listener before saying hello, on the local
//! address of its connection to the root — the interface that routes toward the cluster —
//! so that address can go into the table. Rank 0 needs no peer listener: in the mesh only
//! lower ranks connect to higher ones.
//!
//! With a job secret, the root takes a hello only after the mutual challenge-response of
//! `auth.rs` on its connection; a connection that fails it is refused with a warning, as
//! any other stray, and the root goes on waiting for the real ranks.

use super::auth::{self, JobSecret, Link};
use super::host::{host_hash, host_name, Fnv};
use super::net::{
    accept_auth, accept_until, bind_root, configure, connect_auth, connect_retry, read_frame_by,
    resolve, AuthHello,
};
use super::wire::{self, Kind, RootHello, WireError, MAX_HELLO, MAX_PAYLOAD, VERSION};
use super::RankInfo;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Once;
use std::time::{Duration, Instant, SystemTime};
use tracing::{debug, warn};

/// How long rank 0 waits for one accepted connection to say hello (and, with a secret,
/// answer its challenge) before dropping it: real ranks do at once; this keeps a silent
/// stray from holding up the others.
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// Refusals kept for the root's timeout message (they often explain a missing rank).
const REFUSALS_KEPT: usize = 4;
/// How long a non-root rank the root dropped unheard goes on connecting to it (see
/// `join_root`): long enough for a slow rank 0 to bind, short enough that a root which
/// crashed is named well before the job's timeout.
const REJOIN_GRACE: Duration = Duration::from_secs(5);

/// The warning about running without a secret is given once per process (splits and
/// further communicators would only repeat it).
static NO_SECRET_WARNING: Once = Once::new();

/// What a rank knows after rendezvous.
pub(crate) struct Rendezvous {
    /// Every rank's info, indexed by rank, local ranks assigned.
    pub peers: Vec<RankInfo>,
    /// Chosen by rank 0; tells this communicator's mesh connections from other jobs' (the
    /// job secret, when there is one, is what authenticates them).
    pub nonce: u64,
    /// This rank's peer listener (none on rank 0).
    pub listener: Option<TcpListener>,
}

/// Called by rank 0 with its listening address once bound (tests rendezvous on port 0).
pub(crate) type OnBound<'a> = Option<&'a dyn Fn(SocketAddr)>;

/// Run the rendezvous for `rank` of `nranks` at `root`, bounded by `timeout`,
/// authenticating every connection with `secret` when there is one.
pub(crate) fn rendezvous(
    root: &str,
    rank: usize,
    nranks: usize,
    cuda_device: i32,
    timeout: Duration,
    secret: Option<&JobSecret>,
    on_bound: OnBound<'_>,
) -> Result<Rendezvous> {
    let deadline = super::net::deadline_after(timeout);
    let addrs = resolve(root)?;
    let me = |addr| RankInfo {
        rank,
        pid: std::process::id(),
        host_name: host_name(),
        host_hash: host_hash(),
        local_rank: 0,
        cuda_device,
        addr,
    };
    if rank == 0 {
        if nranks == 1 {
            // Alone: nothing to listen for.
            return Ok(Rendezvous {
                peers: vec![me(addrs[0])],
                nonce: random_nonce(),
                listener: None,
            });
        }
        let listener = bind_root(root, addrs[0])?;
        let port = listener
            .local_addr()
            .map_err(io_err("reading the root listener's address"))?
            .port();
        let mut addr = addrs[0];
        addr.set_port(port);
        debug!(%root, %addr, nranks, "bootstrap root listening");
        if let Some(f) = on_bound {
            f(addr);
        }
        warn_without_secret(secret, &addr.to_string());
        serve_root(root, listener, me(addr), nranks, secret, deadline, timeout)
    } else {
        warn_without_secret(secret, root);
        join_root(root, &addrs, me, nranks, secret, deadline, timeout)
    }
}

/// Once per process: running without a secret lets anyone on the network in.
fn warn_without_secret(secret: Option<&JobSecret>, addr: &str) {
    if secret.is_none() {
        NO_SECRET_WARNING.call_once(|| {
            warn!(
                "no job secret (FERROCX_SECRET / FERROCX_SECRET_FILE): any process that can reach {addr} can join \
                 or stall this job"
            )
        });
    }
}

/// Rank 0: collect a valid hello from every other rank, then send each the table.
fn serve_root(
    root: &str,
    listener: TcpListener,
    me: RankInfo,
    nranks: usize,
    secret: Option<&JobSecret>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Rendezvous> {
    listener
        .set_nonblocking(true)
        .map_err(io_err("configuring the root listener"))?;
    let mut table: Vec<Option<RankInfo>> = vec![None; nranks];
    table[0] = Some(me);
    let mut conns: Vec<(usize, TcpStream)> = Vec::with_capacity(nranks - 1);
    let never = AtomicBool::new(false);
    let mut refusals: Vec<String> = Vec::new();
    let mut refused = 0usize;
    while conns.len() < nranks - 1 {
        let Some((s, from)) =
            accept_until(&listener, deadline, &never).map_err(io_err("accepting at the root"))?
        else {
            let missing: Vec<usize> = (0..nranks).filter(|&r| table[r].is_none()).collect();
            let also = match refused {
                0 => String::new(),
                n => format!(
                    "; refused {n} connection{}: {}{}",
                    if n == 1 { "" } else { "s" },
                    refusals.join("; "),
                    if n > refusals.len() { "; …" } else { "" }
                ),
            };
            return Err(Error::Timeout {
                what: format!(
                    "rendezvous at {root}: {} of {nranks} ranks arrived; missing ranks {} (not started, crashed, or \
                     pointed at another address?){also}",
                    nranks - missing.len(),
                    list(&missing)
                ),
                peer: missing.first().copied(),
                after: timeout,
            });
        };
        match admit(&s, &table, nranks, secret, deadline, timeout) {
            Ok(info) => {
                debug!(rank = info.rank, pid = info.pid, host = %info.host_name, addr = %info.addr, %from, "rank joined");
                let r = info.rank;
                table[r] = Some(info);
                conns.push((r, s));
            }
            Err(Refusal { why, told }) => {
                warn!(%root, "bootstrap root refused a connection from {from}: {why}");
                if !told {
                    // Best effort: a ferrocx rank learns why instead of waiting for the table.
                    let _ = wire::write_frame(&mut &s, Kind::Reject, 0, why.as_bytes());
                }
                refused += 1;
                if refusals.len() < REFUSALS_KEPT {
                    refusals.push(format!("from {from}: {why}"));
                }
            }
        }
    }
    drop(listener); // frees the root port for the next job as soon as possible
    let mut peers: Vec<RankInfo> = table
        .into_iter()
        .map(|i| i.expect("all ranks arrived"))
        .collect();
    assign_local_ranks(&mut peers);
    let nonce = random_nonce();
    let payload = wire::encode_table(nonce, &peers);
    let mut first_err = None;
    for (r, s) in &conns {
        if let Err(e) = wire::write_frame(&mut &*s, Kind::Table, 0, &payload) {
            warn!(rank = r, "cannot send the rank table: {e}");
            first_err.get_or_insert(Error::PeerFailed {
                rank: *r,
                detail: format!(
                    "{} died during rendezvous (sending it the rank table failed: {e})",
                    describe(&peers[*r])
                ),
            });
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    debug!(nranks, "rendezvous complete at the root");
    Ok(Rendezvous {
        peers,
        nonce,
        listener: None,
    })
}

/// Why the root refused a connection.
struct Refusal {
    why: String,
    /// The connection was already told (an `AuthFail`): no `Reject` needed.
    told: bool,
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal { why, told: false }
    }
}

/// Read, authenticate and check one hello at the root; `Err` is why the connection is
/// refused.
fn admit(
    s: &TcpStream,
    table: &[Option<RankInfo>],
    nranks: usize,
    secret: Option<&JobSecret>,
    deadline: Instant,
    timeout: Duration,
) -> std::result::Result<RankInfo, Refusal> {
    configure(s, timeout).map_err(|e| format!("cannot configure the socket: {e}"))?;
    let by = deadline.min(Instant::now() + HELLO_WAIT);
    let f = read_frame_by(s, by, MAX_HELLO).map_err(|e| match e {
        WireError::Timeout => "it sent no hello".to_string(),
        e => format!("reading its hello: {e}"),
    })?;
    if f.kind != Kind::Hello {
        return Err(format!("it sent a {:?} frame instead of a hello", f.kind).into());
    }
    let h = RootHello::decode(&f.payload)?;
    // Authenticated before anything it claims is looked at (or answered).
    let signed = AuthHello {
        link: Link::Root,
        bytes: &f.payload,
        challenge: h.challenge.as_ref(),
    };
    accept_auth(s, secret, "the bootstrap root", &signed, by).map_err(|why| Refusal {
        why: format!("it claims rank {} but {why}", h.rank),
        told: true,
    })?;
    if h.nranks != nranks {
        return Err(format!(
            "rank {} expects {} ranks, the root expects {nranks}: ranks disagree on the size",
            h.rank, h.nranks
        )
        .into());
    }
    if h.rank == 0 || h.rank >= nranks || h.info.rank != h.rank {
        return Err(format!("rank {} is not a valid non-root rank of {nranks}", h.rank).into());
    }
    if let Some(prev) = &table[h.rank] {
        return Err(format!(
            "rank {} already joined as pid {} on host {}; this one is pid {} on host {}: two processes claim one rank",
            h.rank, prev.pid, prev.host_name, h.info.pid, h.info.host_name
        )
        .into());
    }
    Ok(h.info)
}

/// Non-root rank: connect to the root, open the peer listener, say hello, await the table.
fn join_root(
    root: &str,
    addrs: &[SocketAddr],
    me: impl Fn(SocketAddr) -> RankInfo,
    nranks: usize,
    secret: Option<&JobSecret>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Rendezvous> {
    let what = format!("connecting to the bootstrap root {root}: is rank 0 running, and is {root} reachable from here?");
    let mut s = connect_retry(addrs, deadline, timeout, &what, Some(0))?;
    configure(&s, timeout).map_err(io_err("configuring the root connection"))?;
    // The interface this connection left by is one the other ranks can route to.
    let mut local = s
        .local_addr()
        .map_err(io_err("reading the local address"))?;
    local.set_port(0);
    let listener = TcpListener::bind(local)
        .map_err(|e| Error::Bootstrap(format!("cannot open the peer listener on {local}: {e}")))?;
    let info = me(listener
        .local_addr()
        .map_err(io_err("reading the peer listener's address"))?);
    let rank = info.rank;
    debug!(%root, rank, addr = %info.addr, "connected to the bootstrap root");
    let hello_for = |challenge: Option<auth::Challenge>| {
        RootHello {
            version: VERSION,
            rank,
            nranks,
            info: info.clone(),
            challenge,
        }
        .encode()
    };
    let mut challenge = secret.map(|_| auth::challenge()).transpose()?;
    let mut hello = hello_for(challenge);
    let mut rejoin_by = None;
    let first = loop {
        let answer = wire::write_frame(&mut &s, Kind::Hello, 0, &hello)
            .map_err(WireError::Io)
            .and_then(|()| read_frame_by(&s, deadline, MAX_PAYLOAD));
        let e = match answer {
            Ok(f) => break f,
            Err(e) if dropped_unheard(&e) => e,
            Err(e) => return Err(table_error(root, e, timeout)),
        };
        // The root dropped us before a word: most often not ours but an earlier job's
        // root on this port, which closed its listener with our connection still queued
        // (ours may not be up yet). Connect again for a while; a root that crashed is
        // named once that grace is over. Without a secret the root's first word is the
        // table, so a root that timed out waiting for others is named 5 s later too.
        let (by, grace) = *rejoin_by.get_or_insert_with(|| {
            let now = Instant::now();
            let by = deadline.min(now + REJOIN_GRACE);
            (by, by.saturating_duration_since(now))
        });
        debug!(%root, rank, "the bootstrap root dropped this rank unheard ({e}): connecting again");
        s = connect_retry(addrs, by, grace, &what, Some(0)).map_err(|_| Error::PeerFailed {
            rank: 0,
            detail: format!(
                "the bootstrap root {root} dropped the connection before answering ({e}), and no root took a \
                 connection there in the {grace:.1?} after"
            ),
        })?;
        configure(&s, timeout).map_err(io_err("configuring the root connection"))?;
        // A fresh challenge for every connection: an answer is good for one only.
        challenge = secret.map(|_| auth::challenge()).transpose()?;
        hello = hello_for(challenge);
    };
    let read =
        || read_frame_by(&s, deadline, MAX_PAYLOAD).map_err(|e| table_error(root, e, timeout));
    let signed = AuthHello {
        link: Link::Root,
        bytes: &hello,
        challenge: challenge.as_ref(),
    };
    let peer = format!("the bootstrap root {root}");
    let f = connect_auth(&s, secret, &peer, &signed, first, read)?;
    let (nonce, peers) = match f.kind {
        Kind::Table => wire::decode_table(&f.payload).map_err(|e| {
            Error::Bootstrap(format!(
                "bad rank table from the bootstrap root {root}: {e}"
            ))
        })?,
        Kind::Reject => {
            let why = String::from_utf8_lossy(&f.payload);
            return Err(Error::Bootstrap(format!(
                "the bootstrap root {root} rejected rank {rank}: {why}"
            )));
        }
        k => {
            return Err(Error::Bootstrap(format!(
                "the bootstrap root {root} sent a {k:?} frame instead of the rank table"
            )))
        }
    };
    let consistent = peers.len() == nranks
        && peers.iter().enumerate().all(|(i, p)| p.rank == i)
        && peers[rank].pid == info.pid
        && peers[rank].addr == info.addr;
    if !consistent {
        return Err(Error::Bootstrap(format!(
            "the rank table from {root} is inconsistent with this rank ({} entries for {nranks} ranks)",
            peers.len()
        )));
    }
    debug!(rank, nranks, "rendezvous complete");
    Ok(Rendezvous {
        peers,
        nonce,
        listener: Some(listener),
    })
}

/// The root closed or reset a connection before sending anything on it.
fn dropped_unheard(e: &WireError) -> bool {
    use std::io::ErrorKind as K;
    match e {
        WireError::Closed => true,
        // Not `UnexpectedEof`: a close inside a frame means the root said something.
        WireError::Io(e) => matches!(
            e.kind(),
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
        ),
        _ => false,
    }
}

/// What a failed read of the root's answer means to a non-root rank.
fn table_error(root: &str, e: WireError, timeout: Duration) -> Error {
    match e {
        WireError::Timeout => Error::Timeout {
            what: format!(
                "the rank table from the bootstrap root {root} (rank 0 is still waiting for other ranks to arrive)"
            ),
            peer: Some(0),
            after: timeout,
        },
        WireError::Closed => Error::PeerFailed {
            rank: 0,
            detail: format!("the bootstrap root {root} closed the connection during rendezvous"),
        },
        e => Error::PeerFailed {
            rank: 0,
            detail: format!("reading the rank table from the bootstrap root {root}: {e}"),
        },
    }
}

/// A rank's local rank is its index among the ranks of its host, in rank order.
pub(crate) fn assign_local_ranks(peers: &mut [RankInfo]) {
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for p in peers {
        let n = seen.entry(p.host_hash).or_insert(0);
        p.local_rank = *n;
        *n += 1;
    }
}

/// A nonce no other communicator is likely to share: std's per-process random hash keys,
/// mixed with the time and pid (no extra dependency for a random source).
fn random_nonce() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.write_u32(std::process::id());
    h.finish() | 1 // never 0, which reads as "unset" in dumps
}

/// A communicator's public id from its nonce (the nonce itself stays private).
pub(crate) fn comm_hash(nonce: u64) -> u64 {
    let mut h = Fnv::new();
    h.write(b"ferrocx-comm");
    h.write(&nonce.to_le_bytes());
    h.finish()
}

/// "rank 2 (pid 1234 on host h)": how errors name a peer.
pub(crate) fn describe(p: &RankInfo) -> String {
    format!("rank {} (pid {} on host {})", p.rank, p.pid, p.host_name)
}

/// `[1, 2, 3]`, shortened for thousands of ranks.
pub(crate) fn list(ranks: &[usize]) -> String {
    const SHOW: usize = 16;
    let shown: Vec<String> = ranks.iter().take(SHOW).map(|r| r.to_string()).collect();
    if ranks.len() > SHOW {
        format!("[{}, … {} more]", shown.join(", "), ranks.len() - SHOW)
    } else {
        format!("[{}]", shown.join(", "))
    }
}

fn io_err(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Bootstrap(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ranks_follow_host_order() {
        let mk = |rank, host_hash| RankInfo {
            rank,
            pid: 1,
            host_name: String::new(),
            host_hash,
            local_rank: 99,
            cuda_device: 0,
            addr: "127.0.0.1:1".parse().unwrap(),
        };
        let mut peers = vec![mk(0, 7), mk(1, 8), mk(2, 7), mk(3, 8), mk(4, 9), mk(5, 7)];
        assign_local_ranks(&mut peers);
        let local: Vec<usize> = peers.iter().map(|p| p.local_rank).collect();
        assert_eq!(local, [0, 0, 1, 1, 0, 2]);
    }

    #[test]
    fn rank_lists_are_bounded() {
        assert_eq!(list(&[1, 2]), "[1, 2]");
        let many: Vec<usize> = (0..100).collect();
        assert!(list(&many).ends_with("… 84 more]"));
        assert_ne!(random_nonce(), random_nonce());
        assert_eq!(comm_hash(5), comm_hash(5));
    }
}
