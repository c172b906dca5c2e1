//! Completion entries: what the proxy writes back for the GPU to read.
//!
//! | offset | field |
//! |---|---|
//! | [`CQE_STAMP`] (0) | u64 stamp, index + 1, written last |
//! | [`CQE_REQ_ID`] (8) | u64 the request id (the request's index in its queue) |
//! | [`CQE_VALUE`] (16) | u64 fetched value of a fetch-add, else 0 |
//! | [`CQE_PEER`] (24) | u32 the peer |
//! | [`CQE_STATUS`] (28) | u8 [`CqStatus`] |
//! | [`CQE_PATHS`] (29) | u8 [`PathSet`]: the path that carried it, or the paths that failed |
//! | 30 | 2 bytes reserved, zero |

use super::{get_u32, get_u64, put_u32, put_u64, DecodeError, QueueError, QueueMemory, Ring};
use crate::health::{Path, PeerId};

/// Bytes of one completion entry (a multiple of 16).
pub const CQE_BYTES: usize = 32;
/// u64 at 0: the ring stamp.
pub const CQE_STAMP: usize = super::ENTRY_STAMP;
/// u64 at 8: request id.
pub const CQE_REQ_ID: usize = 8;
/// u64 at 16: fetched value.
pub const CQE_VALUE: usize = 16;
/// u32 at 24: peer.
pub const CQE_PEER: usize = 24;
/// u8 at 28: status.
pub const CQE_STATUS: usize = 28;
/// u8 at 29: path bits.
pub const CQE_PATHS: usize = 29;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CqStatus {
    /// Done: the data (and signal) landed once; `value` holds a fetch-add's result.
    Ok = 0,
    /// The peer is unreachable: `paths` names the paths that failed (both, or the
    /// primary alone when there is no backup). Whether the data landed is unknown.
    PeerUnreachable = 1,
    /// The record's bytes were not a valid request; nothing was sent.
    BadRecord = 2,
    /// The queue's peer has no paths set up; nothing was sent.
    UnknownPeer = 3,
}

impl CqStatus {
    fn from_u8(v: u8) -> Result<CqStatus, DecodeError> {
        Ok(match v {
            0 => CqStatus::Ok,
            1 => CqStatus::PeerUnreachable,
            2 => CqStatus::BadRecord,
            3 => CqStatus::UnknownPeer,
            s => return Err(DecodeError::UnknownStatus(s)),
        })
    }
}

/// A set of paths, as one byte: bit 0 the primary, bit 1 the backup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathSet(pub u8);

impl PathSet {
    /// No path.
    pub const NONE: PathSet = PathSet(0);
    /// Both paths.
    pub const BOTH: PathSet = PathSet(0b11);

    /// The set holding only `path`.
    pub fn of(path: Path) -> PathSet {
        match path {
            Path::Primary => PathSet(0b01),
            Path::Backup => PathSet(0b10),
        }
    }

    /// Whether `path` is in the set.
    pub fn contains(self, path: Path) -> bool {
        self.0 & PathSet::of(path).0 != 0
    }
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// The request id the GPU got when it pushed the request.
    pub req_id: u64,
    /// How it ended.
    pub status: CqStatus,
    /// The peer.
    pub peer: PeerId,
    /// [`CqStatus::Ok`]: the path that carried it; [`CqStatus::PeerUnreachable`]:
    /// the paths that failed; otherwise none.
    pub paths: PathSet,
    /// A fetch-add's fetched value; 0 otherwise.
    pub value: u64,
}

impl CqEntry {
    /// The entry bytes (stamp zero: the ring writes it).
    pub fn encode(&self) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        put_u64(&mut b, CQE_REQ_ID, self.req_id);
        put_u64(&mut b, CQE_VALUE, self.value);
        put_u32(&mut b, CQE_PEER, self.peer.0);
        b[CQE_STATUS] = self.status as u8;
        b[CQE_PATHS] = self.paths.0;
        b
    }

    /// Reads an entry; the stamp is not looked at (the ring checked it).
    pub fn decode(b: &[u8; CQE_BYTES]) -> Result<CqEntry, DecodeError> {
        let paths = b[CQE_PATHS];
        if paths & !PathSet::BOTH.0 != 0 {
            return Err(DecodeError::UnknownPaths(paths));
        }
        Ok(CqEntry {
            req_id: get_u64(b, CQE_REQ_ID),
            status: CqStatus::from_u8(b[CQE_STATUS])?,
            peer: PeerId(get_u32(b, CQE_PEER)),
            paths: PathSet(paths),
            value: get_u64(b, CQE_VALUE),
        })
    }
}

/// A completion queue: a [`Ring`] of [`CqEntry`] entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionQueue {
    ring: Ring,
}

impl CompletionQueue {
    /// A queue of `slots` completions.
    pub fn new(slots: u32) -> Result<Self, QueueError> {
        Ok(CompletionQueue {
            ring: Ring::new(slots, CQE_BYTES)?,
        })
    }

    /// Its ring.
    pub fn ring(&self) -> Ring {
        self.ring
    }

    /// Proxy side: publishes `e`; refused with [`QueueError::Full`] while the GPU
    /// has not read enough.
    pub fn push(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        e: &CqEntry,
    ) -> Result<u64, QueueError> {
        self.ring.push(mem, &e.encode())
    }

    /// GPU side (the Rust model of it): takes the next completion, if one is
    /// published and its stamp visible.
    #[allow(clippy::type_complexity)]
    pub fn pop(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
    ) -> Result<Option<(u64, Result<CqEntry, DecodeError>)>, QueueError> {
        let mut b = [0u8; CQE_BYTES];
        Ok(self
            .ring
            .pop(mem, &mut b)?
            .map(|i| (i, CqEntry::decode(&b))))
    }
}
