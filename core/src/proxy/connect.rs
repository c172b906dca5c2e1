//! The connection phases the proxy service thread runs: how the connections
//! a group needs are established (setup → blob exchange over the bootstrap →
//! connect until done).
//!
//! The sender chooses the transport (`plugin::select`) and tells the receiver
//! which one in its request, so both ends always run the same plugin. Phases
//! per group (no cycles, so no deadlock whatever order ranks post in):
//! 1. for every needed send side: choose, `setup`, send REQ(name, blob);
//! 2. for every needed receive side: wait REQ, `setup` with that plugin, send ACK(blob), `connect`;
//! 3. for every send side: wait ACK, `connect`;
//! 4. repeat `connect` on the ones in progress until all are done (bounded).

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

/// Tell `peer` (in setup phase `phase`) that this end failed, then return the error.
fn refuse(shared: &CommShared, peer: usize, phase: u64, channel: u32, err: Error) -> Error {
    let why = match &err {
        Error::NoTransport { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    let _ = shared
        .bootstrap
        .send(peer, tag(phase, channel), &encode("", &FxBlob::new(), &why));
    err
}

struct Pending {
    conn: Connection,
    peer_blob: Option<FxBlob>,
    done: bool,
}

/// Establish the given (channel, peer, dir) connections.
pub(crate) fn establish(
    shared: &CommShared,
    needs: &[(usize, usize, Dir)],
) -> Result<Vec<Connection>> {
    let mut sends: Vec<Pending> = Vec::new();
    let mut recvs: Vec<Pending> = Vec::new();
    // Phase 1: send sides choose, set up and announce. A failure is announced
    // too (empty name + reason), so the receiver fails at once instead of timing out.
    for &(channel, peer, _) in needs.iter().filter(|(_, _, d)| *d == Dir::Send) {
        let channel = channel as u32;
        let opened = shared
            .candidates()
            .choose_for(peer, shared.host_channel(channel as usize))
            .and_then(|p| open_end(shared, &p, peer, Dir::Send, channel).map(|(c, b)| (p, c, b)));
        let (plugin, conn, blob) = match opened {
            Ok(x) => x,
            Err(e) => return Err(refuse(shared, peer, 0, channel, e)),
        };
        shared
            .bootstrap
            .send(peer, tag(0, channel), &encode(plugin.name(), &blob, ""))?;
        sends.push(Pending {
            conn,
            peer_blob: None,
            done: false,
        });
    }
    // Phase 2: receive sides follow the sender's choice (or report why they cannot).
    for &(channel, peer, _) in needs.iter().filter(|(_, _, d)| *d == Dir::Recv) {
        let channel = channel as u32;
        let msg = shared.bootstrap.recv(peer, tag(0, channel)).map_err(|e| {
            setup_wait_error(
                e,
                "its connection request (rank {peer} has not posted a send to this rank)",
            )
        })?;
        let (name, sblob, status) = decode(peer, &msg)?;
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
        let done = conn.plugin.connect(conn.raw, &sblob, peer)?;
        recvs.push(Pending {
            conn,
            peer_blob: Some(sblob),
            done,
        });
    }
    // Phase 3: send sides connect with the receivers' answers.
    for p in sends.iter_mut() {
        let peer = p.conn.peer;
        let channel = p.conn.channel;
        let msg = shared.bootstrap.recv(peer, tag(1, channel)).map_err(|e| {
            setup_wait_error(
                e,
                "its connection answer (rank {peer} has not posted a receive from this rank)",
            )
        })?;
        let (name, rblob, status) = decode(peer, &msg)?;
        if name.is_empty() {
            return Err(Error::NoTransport {
                peer,
                detail: format!("rank {peer} refused the connection: {status}"),
            });
        }
        p.done = p.conn.plugin.connect(p.conn.raw, &rblob, peer)?;
        p.peer_blob = Some(rblob);
    }
    // Phase 4: finish connections still in progress.
    let start = Instant::now();
    let mut idle = 0u32;
    loop {
        let mut waiting = None;
        for p in sends.iter_mut().chain(recvs.iter_mut()).filter(|p| !p.done) {
            let blob = p.peer_blob.as_ref().expect("set in phases 2-3");
            p.done = p.conn.plugin.connect(p.conn.raw, blob, p.conn.peer)?;
            if !p.done {
                waiting = Some(p.conn.peer);
            }
        }
        let Some(peer) = waiting else { break };
        shared.check_peers()?;
        if start.elapsed() > shared.timeout {
            return Err(Error::Timeout {
                what: "connection setup (connect still in progress)".into(),
                peer: Some(peer),
                after: shared.timeout,
            });
        }
        idle += 1;
        super::backoff(idle);
    }
    let mut out = Vec::with_capacity(sends.len() + recvs.len());
    for p in sends.into_iter().chain(recvs) {
        p.conn
            .plugin
            .proxy_hook("proxy_connect", p.conn.raw, p.conn.peer)?;
        out.push(p.conn);
    }
    Ok(out)
}
