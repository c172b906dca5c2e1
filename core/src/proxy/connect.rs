//! The connection phases the proxy service thread runs: how the connections
//! a group needs are established (setup → blob exchange over the bootstrap →
//! connect until done).
//!
//! The sender chooses the transport (`plugin::select`) and tells the receiver
//! which one in its request, so both ends always run the same plugin:
//! 1. [`announce`]: every needed send side chooses, `setup`s and sends REQ(name, blob);
//! 2. [`Handshake::finish`], taking the peers' messages in the order they come:
//!    a receive side takes its REQ, `setup`s with that plugin, sends ACK(blob)
//!    and `connect`s; a send side takes its ACK and `connect`s; `connect`s in
//!    progress are repeated until done (bounded by the timeout).
//!
//! No step waits for one peer while another's message is pending, and each
//! connection is handed over as soon as it is made: a group's operations on
//! one connection may be what lets a peer post its side of another. A call
//! still returns only once its connections exist (docs/ARCHITECTURE.md,
//! Connections, names the cycle that leaves through a caller's next call).

use crate::error::{Error, Result};
use crate::plugin::{Connection, Dir, PluginInstance};
use crate::shared::CommShared;
use ferrocx_sdk::abi::*;
use std::sync::Arc;
use std::time::Instant;

const TAG_CONN: u64 = 0x4658_0000_0000_0000; // "FX" connection-setup tag space
fn tag(phase: u64, channel: u32) -> u64 {
    TAG_CONN | (phase << 32) | channel as u64
}

fn conn_id(shared: &CommShared, sender: usize, receiver: usize, channel: u32) -> u64 {
    let mut h = shared.comm_hash ^ 0x9e37_79b9_7f4a_7c15;
    for v in [sender as u64, receiver as u64, channel as u64] {
        h = (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(17);
    }
    h
}

fn req(shared: &CommShared, peer: usize, dir: Dir, channel: u32) -> FxConnReq {
    let (s, r) = if dir == Dir::Send {
        (shared.rank, peer)
    } else {
        (peer, shared.rank)
    };
    FxConnReq {
        me: shared.peer_info[shared.rank],
        peer: shared.peer_info[peer],
        direction: if dir == Dir::Send {
            FX_DIR_SEND
        } else {
            FX_DIR_RECV
        },
        channel: channel as i32,
        conn_id: conn_id(shared, s, r, channel),
    }
}

fn encode(name: &str, blob: &FxBlob, status: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(FX_NAME_BYTES + 4 + blob.len as usize + status.len());
    let mut n = [0u8; FX_NAME_BYTES];
    let k = name.len().min(FX_NAME_BYTES - 1);
    n[..k].copy_from_slice(&name.as_bytes()[..k]);
    out.extend_from_slice(&n);
    out.extend_from_slice(&blob.len.to_le_bytes());
    out.extend_from_slice(blob.as_bytes());
    out.extend_from_slice(status.as_bytes());
    out
}

fn decode(peer: usize, msg: &[u8]) -> Result<(String, FxBlob, String)> {
    let bad = || {
        Error::Bootstrap(format!(
            "malformed connection message from rank {peer} ({} bytes)",
            msg.len()
        ))
    };
    if msg.len() < FX_NAME_BYTES + 4 {
        return Err(bad());
    }
    let name: String = String::from_utf8_lossy(&msg[..FX_NAME_BYTES])
        .trim_end_matches('\0')
        .to_string();
    let len = u32::from_le_bytes(
        msg[FX_NAME_BYTES..FX_NAME_BYTES + 4]
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let body = &msg[FX_NAME_BYTES + 4..];
    if len > FX_BLOB_BYTES || body.len() < len {
        return Err(bad());
    }
    let mut blob = FxBlob::new();
    blob.bytes[..len].copy_from_slice(&body[..len]);
    blob.len = len as u32;
    Ok((
        name,
        blob,
        String::from_utf8_lossy(&body[len..]).into_owned(),
    ))
}

/// Say what connection setup was waiting for instead of naming a bootstrap tag.
fn setup_wait_error(e: Error, waiting_for: &str) -> Error {
    match e {
        Error::Timeout { peer, after, .. } => {
            let what = format!(
                "connection setup, waiting for {}",
                waiting_for.replace("{peer}", &peer.map_or("?".into(), |p| p.to_string()))
            );
            Error::Timeout { what, peer, after }
        }
        Error::PeerFailed { rank, detail } => {
            let detail = detail
                .split_once(" before bootstrap message")
                .map_or(detail.clone(), |(head, _)| head.to_string());
            let detail = format!(
                "{detail}, while this rank waited for {}",
                waiting_for.replace("{peer}", &rank.to_string())
            );
            Error::PeerFailed { rank, detail }
        }
        other => other,
    }
}

/// `setup` one end with `plugin` and run its optional `proxy_setup`.
fn open_end(
    shared: &CommShared,
    plugin: &Arc<PluginInstance>,
    peer: usize,
    dir: Dir,
    channel: u32,
) -> Result<(Connection, FxBlob)> {
    let (raw, blob) = plugin.setup(&req(shared, peer, dir, channel))?;
    let conn = Connection {
        plugin: plugin.clone(),
        raw,
        peer,
        dir,
        channel,
    };
    plugin.proxy_hook("proxy_setup", raw, peer)?;
    Ok((conn, blob))
}

/// What a refusal tells the peer of `err`.
fn refusal(err: &Error) -> String {
    match err {
        Error::NoTransport { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// Tell `peer` (in setup phase `phase`) that this end failed, then return the error.
fn refuse(shared: &CommShared, peer: usize, phase: u64, channel: u32, err: Error) -> Error {
    let why = refusal(&err);
    let _ = shared
        .bootstrap
        .send(peer, tag(phase, channel), &encode("", &FxBlob::new(), &why));
    err
}

/// A send side waiting for the receiver's answer, or a connection whose
/// `connect` is still in progress.
struct Pending {
    conn: Connection,
    peer_blob: Option<FxBlob>,
}

/// Connections being made: the send sides announced (phase 1), waiting for
/// the receive sides' requests and the send sides' answers (see
/// [`finish`](Handshake::finish)).
pub(crate) struct Handshake {
    /// Send sides waiting for the receiver's answer.
    answers: Vec<Pending>,
    /// (channel, peer) of the receive sides waiting for the sender's request.
    requests: Vec<(u32, usize)>,
}

/// Phase 1 for the given (channel, peer, dir) connections: every send side
/// chooses its transport and sets up its end; then each receiver gets its
/// request. Local only (no waiting). Every end is set up before any request
/// leaves: when one fails, every receiver is told why instead (an empty name
/// and the reason), so none waits for the timeout and none keeps a request
/// or answer that a later attempt would take for its own.
pub(crate) fn announce(shared: &CommShared, needs: &[(usize, usize, Dir)]) -> Result<Handshake> {
    let sends: Vec<(u32, usize)> = needs
        .iter()
        .filter(|(_, _, d)| *d == Dir::Send)
        .map(|&(channel, peer, _)| (channel as u32, peer))
        .collect();
    let mut opened = Vec::with_capacity(sends.len());
    for &(channel, peer) in &sends {
        let end = shared
            .candidates()
            .choose_for(peer, shared.host_channel(channel as usize))
            .and_then(|p| open_end(shared, &p, peer, Dir::Send, channel).map(|(c, b)| (p, c, b)));
        match end {
            Ok(x) => opened.push(x),
            Err(e) => {
                let why = refusal(&e);
                for &(channel, peer) in &sends {
                    let _ = shared.bootstrap.send(
                        peer,
                        tag(0, channel),
                        &encode("", &FxBlob::new(), &why),
                    );
                }
                return Err(e);
            }
        }
    }
    let mut answers = Vec::with_capacity(opened.len());
    for (plugin, conn, blob) in opened {
        shared.bootstrap.send(
            conn.peer,
            tag(0, conn.channel),
            &encode(plugin.name(), &blob, ""),
        )?;
        answers.push(Pending {
            conn,
            peer_blob: None,
        });
    }
    let requests = needs
        .iter()
        .filter(|(_, _, d)| *d == Dir::Recv)
        .map(|&(channel, peer, _)| (channel as u32, peer))
        .collect();
    Ok(Handshake { answers, requests })
}

impl Handshake {
    /// Phases 2–4, in the order the peers' messages come: a receive side
    /// takes its sender's request (sets up with the sender's transport,
    /// answers, connects); a send side takes its receiver's answer and
    /// connects; connections still in progress are driven until done. Each
    /// connection goes to `install` as soon as it is made, so operations
    /// queued on it start while the others are still being made: a peer may
    /// post its side of one connection only after an operation on another
    /// has completed. Those operations may fail meanwhile and break the
    /// communicator: `stopped` says so (checked, with every peer's state,
    /// every [`CHECK_EVERY`] of waiting), and the setup ends with it.
    pub(crate) fn finish(
        self,
        shared: &CommShared,
        install: &mut dyn FnMut(Connection),
        stopped: &dyn Fn() -> Option<Error>,
    ) -> Result<()> {
        let Handshake {
            mut answers,
            mut requests,
        } = self;
        let mut connecting: Vec<Pending> = Vec::new();
        let deadline = Instant::now() + shared.timeout;
        let mut idle = 0u32;
        let mut finish_one = |p: Pending| -> Result<()> {
            p.conn
                .plugin
                .proxy_hook("proxy_connect", p.conn.raw, p.conn.peer)?;
            install(p.conn);
            Ok(())
        };
        loop {
            // Drive the connections in progress.
            let mut i = 0;
            while i < connecting.len() {
                let p = &connecting[i];
                let blob = p
                    .peer_blob
                    .as_ref()
                    .expect("set when it started connecting");
                if p.conn.plugin.connect(p.conn.raw, blob, p.conn.peer)? {
                    finish_one(connecting.swap_remove(i))?;
                    idle = 0;
                } else {
                    i += 1;
                }
            }
            if requests.is_empty() && answers.is_empty() {
                let Some(p) = connecting.first() else {
                    return Ok(());
                };
                shared.check_peers()?;
                if let Some(e) = stopped() {
                    return Err(e);
                }
                if Instant::now() > deadline {
                    return Err(Error::Timeout {
                        what: "connection setup (connect still in progress)".into(),
                        peer: Some(p.conn.peer),
                        after: shared.timeout,
                    });
                }
                idle += 1;
                super::backoff(idle);
                continue;
            }
            // Requests first, in the order asked: a timeout names the first one
            // still awaited (as the phases did, one after the other).
            let keys: Vec<(usize, u64)> = requests
                .iter()
                .map(|&(channel, peer)| (peer, tag(0, channel)))
                .chain(
                    answers
                        .iter()
                        .map(|p| (p.conn.peer, tag(1, p.conn.channel))),
                )
                .collect();
            // In slices: connections in progress are looked at again soon, and
            // between slices this rank's own state and every peer's.
            let slice = if connecting.is_empty() {
                CHECK_EVERY
            } else {
                std::time::Duration::from_micros(100)
            };
            let until = deadline.min(Instant::now() + slice);
            // Name what was awaited of the peer an error is about.
            let explain = |e: Error| {
                let waiting_for = match e.peer() {
                    Some(r) if requests.iter().any(|&(_, p)| p == r) => REQUEST,
                    Some(r) if answers.iter().any(|p| p.conn.peer == r) => ANSWER,
                    Some(_) => OTHERS,
                    None if requests.is_empty() => ANSWER,
                    None => REQUEST,
                };
                setup_wait_error(e, waiting_for)
            };
            let (k, msg) = match shared.bootstrap.recv_any(&keys, until) {
                Ok(got) => got,
                Err(Error::Timeout { .. }) if Instant::now() < deadline => {
                    if let Err(e) = shared.check_peers() {
                        return Err(explain(e));
                    }
                    if let Some(e) = stopped() {
                        return Err(e);
                    }
                    continue;
                }
                // The wait was in slices: the whole timeout passed.
                Err(Error::Timeout { what, peer, .. }) => {
                    let e = Error::Timeout {
                        what,
                        peer,
                        after: shared.timeout,
                    };
                    return Err(explain(e));
                }
                Err(e) => return Err(explain(e)),
            };
            if k < requests.len() {
                let (channel, peer) = requests.remove(k);
                let p = accept(shared, peer, channel, &msg)?;
                if p.conn
                    .plugin
                    .connect(p.conn.raw, p.peer_blob.as_ref().expect("set"), peer)?
                {
                    finish_one(p)?;
                } else {
                    connecting.push(p);
                }
            } else {
                let mut p = answers.remove(k - requests.len());
                let peer = p.conn.peer;
                let (name, rblob, status) = decode(peer, &msg)?;
                if name.is_empty() {
                    return Err(Error::NoTransport {
                        peer,
                        detail: format!("rank {peer} refused the connection: {status}"),
                    });
                }
                let done = p.conn.plugin.connect(p.conn.raw, &rblob, peer)?;
                p.peer_blob = Some(rblob);
                if done {
                    finish_one(p)?;
                } else {
                    connecting.push(p);
                }
            }
        }
    }
}

/// How often a wait for the peers' setup messages looks at this rank's own
/// state and at every peer (not only those it waits for).
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

const OTHERS: &str = "connections with its peers";
const REQUEST: &str = "its connection request (rank {peer} has not posted a send to this rank)";
const ANSWER: &str = "its connection answer (rank {peer} has not posted a receive from this rank)";

/// A receive side follows the sender's request `msg` (or reports why it cannot):
/// sets up with the sender's transport and answers.
fn accept(shared: &CommShared, peer: usize, channel: u32, msg: &[u8]) -> Result<Pending> {
    let (name, sblob, status) = decode(peer, msg)?;
    if name.is_empty() {
        return Err(Error::PeerFailed {
            rank: peer,
            detail: format!("it could not set up its end of the connection: {status}"),
        });
    }
    let accepted = shared
        .candidates()
        .follow(peer, &name)
        .and_then(|p| open_end(shared, &p, peer, Dir::Recv, channel));
    let (conn, blob) = match accepted {
        Ok(x) => x,
        Err(e) => return Err(refuse(shared, peer, 1, channel, e)),
    };
    shared
        .bootstrap
        .send(peer, tag(1, channel), &encode(&name, &blob, ""))?;
    Ok(Pending {
        conn,
        peer_blob: Some(sblob),
    })
}
