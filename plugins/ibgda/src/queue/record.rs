//! Request entries: what a GPU thread asks the proxy (or the NIC) to do.
//!
//! | offset | field |
//! |---|---|
//! | [`REC_STAMP`] (0) | u64 stamp, index + 1, written last |
//! | [`REC_KIND`] (8) | u8 kind: [`KIND_PUT`], [`KIND_PUT_SIGNAL`], [`KIND_FETCH_ADD`], [`KIND_QUIET`] (0 never: fresh memory) |
//! | [`REC_SIGNAL_OP`] (9) | u8 [`SIGNAL_SET`] or [`SIGNAL_ADD`] (put with signal) |
//! | 10 | 2 bytes reserved, zero |
//! | [`REC_WINDOW`] (12) | u32 symmetric window handle |
//! | [`REC_DST`] (16) | u64 offset in the peer's window (fetch-add: the word) |
//! | [`REC_SRC`] (24) | u64 offset of the data in this rank's window |
//! | [`REC_BYTES`] (32) | u32 bytes to put |
//! | 36 | 4 bytes reserved, zero |
//! | [`REC_SIGNAL`] (40) | u64 offset of the 8-byte signal word in the peer's window |
//! | [`REC_VALUE`] (48) | u64 signal value, or the fetch-add addend |
//! | 56 | 8 bytes reserved, zero |

use super::{get_u32, get_u64, put_u32, put_u64, DecodeError, QueueError, QueueMemory, Ring};

/// Bytes of one request entry (a multiple of 16: one 64-byte line).
pub const RECORD_BYTES: usize = 64;
/// u64 at 0: the ring stamp.
pub const REC_STAMP: usize = super::ENTRY_STAMP;
/// u8 at 8: the kind.
pub const REC_KIND: usize = 8;
/// u8 at 9: the signal operation.
pub const REC_SIGNAL_OP: usize = 9;
/// u32 at 12: the window handle.
pub const REC_WINDOW: usize = 12;
/// u64 at 16: destination offset.
pub const REC_DST: usize = 16;
/// u64 at 24: source offset.
pub const REC_SRC: usize = 24;
/// u32 at 32: byte count.
pub const REC_BYTES: usize = 32;
/// u64 at 40: signal word offset.
pub const REC_SIGNAL: usize = 40;
/// u64 at 48: signal value or addend.
pub const REC_VALUE: usize = 48;

/// Kind byte of a put.
pub const KIND_PUT: u8 = 1;
/// Kind byte of a put with signal.
pub const KIND_PUT_SIGNAL: u8 = 2;
/// Kind byte of a fetch-add.
pub const KIND_FETCH_ADD: u8 = 3;
/// Kind byte of a quiet/fence marker.
pub const KIND_QUIET: u8 = 4;
/// Signal operation byte: store the value.
pub const SIGNAL_SET: u8 = 0;
/// Signal operation byte: add the value (wrapping).
pub const SIGNAL_ADD: u8 = 1;

/// How a put-with-signal updates its signal word, once its data has landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// The word becomes the value.
    Set,
    /// The value is added to the word (wrapping).
    Add,
}

impl SignalOp {
    /// The word after applying this operation with `value` to `old`.
    pub fn apply(self, old: u64, value: u64) -> u64 {
        match self {
            SignalOp::Set => value,
            SignalOp::Add => old.wrapping_add(value),
        }
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRecord {
    /// Copy `bytes` from `src` in this rank's `window` to `dst` in the peer's.
    Put {
        /// Symmetric window handle.
        window: u32,
        /// Offset in the peer's window.
        dst: u64,
        /// Offset in this rank's window.
        src: u64,
        /// Bytes.
        bytes: u32,
    },
    /// A put, then (after its data is visible) `op` with `value` on the 8-byte
    /// signal word at `signal` of the same window.
    PutSignal {
        /// Symmetric window handle.
        window: u32,
        /// Offset in the peer's window.
        dst: u64,
        /// Offset in this rank's window.
        src: u64,
        /// Bytes.
        bytes: u32,
        /// Offset of the signal word in the peer's window (8-aligned).
        signal: u64,
        /// Value to set or add.
        value: u64,
        /// Set or add.
        op: SignalOp,
    },
    /// Atomic fetch-add of `add` on the 8-byte word at `dst`; the completion
    /// carries the value before the add.
    FetchAdd {
        /// Symmetric window handle.
        window: u32,
        /// Offset of the word in the peer's window (8-aligned).
        dst: u64,
        /// Addend (wrapping).
        add: u64,
    },
    /// Quiet/fence marker: completes once every earlier request of this queue has
    /// completed, and nothing after it is carried before that.
    Quiet,
}

/// The data a put (with or without signal) moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Symmetric window handle.
    pub window: u32,
    /// Offset in the peer's window.
    pub dst: u64,
    /// Offset in this rank's window.
    pub src: u64,
    /// Bytes.
    pub bytes: u32,
}

impl WorkRecord {
    /// What a put or a put with signal copies; `None` for the others.
    pub fn transfer(&self) -> Option<Transfer> {
        match *self {
            WorkRecord::Put {
                window,
                dst,
                src,
                bytes,
            }
            | WorkRecord::PutSignal {
                window,
                dst,
                src,
                bytes,
                ..
            } => Some(Transfer {
                window,
                dst,
                src,
                bytes,
            }),
            WorkRecord::FetchAdd { .. } | WorkRecord::Quiet => None,
        }
    }

    /// The entry bytes (stamp zero: the ring writes it).
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        match *self {
            WorkRecord::Put {
                window,
                dst,
                src,
                bytes,
            } => {
                b[REC_KIND] = KIND_PUT;
                put_u32(&mut b, REC_WINDOW, window);
                put_u64(&mut b, REC_DST, dst);
                put_u64(&mut b, REC_SRC, src);
                put_u32(&mut b, REC_BYTES, bytes);
            }
            WorkRecord::PutSignal {
                window,
                dst,
                src,
                bytes,
                signal,
                value,
                op,
            } => {
                b[REC_KIND] = KIND_PUT_SIGNAL;
                b[REC_SIGNAL_OP] = match op {
                    SignalOp::Set => SIGNAL_SET,
                    SignalOp::Add => SIGNAL_ADD,
                };
                put_u32(&mut b, REC_WINDOW, window);
                put_u64(&mut b, REC_DST, dst);
                put_u64(&mut b, REC_SRC, src);
                put_u32(&mut b, REC_BYTES, bytes);
                put_u64(&mut b, REC_SIGNAL, signal);
                put_u64(&mut b, REC_VALUE, value);
            }
            WorkRecord::FetchAdd { window, dst, add } => {
                b[REC_KIND] = KIND_FETCH_ADD;
                put_u32(&mut b, REC_WINDOW, window);
                put_u64(&mut b, REC_DST, dst);
                put_u64(&mut b, REC_VALUE, add);
            }
            WorkRecord::Quiet => b[REC_KIND] = KIND_QUIET,
        }
        b
    }

    /// Reads an entry; the stamp is not looked at (the ring checked it).
    pub fn decode(b: &[u8; RECORD_BYTES]) -> Result<WorkRecord, DecodeError> {
        let window = get_u32(b, REC_WINDOW);
        let dst = get_u64(b, REC_DST);
        let aligned = |field, offset: u64| {
            if offset.is_multiple_of(8) {
                Ok(offset)
            } else {
                Err(DecodeError::Misaligned { field, offset })
            }
        };
        match b[REC_KIND] {
            KIND_PUT => Ok(WorkRecord::Put {
                window,
                dst,
                src: get_u64(b, REC_SRC),
                bytes: get_u32(b, REC_BYTES),
            }),
            KIND_PUT_SIGNAL => Ok(WorkRecord::PutSignal {
                window,
                dst,
                src: get_u64(b, REC_SRC),
                bytes: get_u32(b, REC_BYTES),
                signal: aligned("signal", get_u64(b, REC_SIGNAL))?,
                value: get_u64(b, REC_VALUE),
                op: match b[REC_SIGNAL_OP] {
                    SIGNAL_SET => SignalOp::Set,
                    SIGNAL_ADD => SignalOp::Add,
                    o => return Err(DecodeError::UnknownSignalOp(o)),
                },
            }),
            KIND_FETCH_ADD => Ok(WorkRecord::FetchAdd {
                window,
                dst: aligned("fetch-add target", dst)?,
                add: get_u64(b, REC_VALUE),
            }),
            KIND_QUIET => Ok(WorkRecord::Quiet),
            k => Err(DecodeError::UnknownKind(k)),
        }
    }
}

/// A request queue: a [`Ring`] of [`WorkRecord`] entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestQueue {
    ring: Ring,
}

impl RequestQueue {
    /// A queue of `slots` records.
    pub fn new(slots: u32) -> Result<Self, QueueError> {
        Ok(RequestQueue {
            ring: Ring::new(slots, RECORD_BYTES)?,
        })
    }

    /// Its ring.
    pub fn ring(&self) -> Ring {
        self.ring
    }

    /// GPU side (the Rust model of it): publishes `rec`; returns its request id
    /// (its index in the ring). It keeps the ring's producer index as its claim
    /// counter; the consumer never reads it.
    pub fn push(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        rec: &WorkRecord,
    ) -> Result<u64, QueueError> {
        self.ring.push(mem, &rec.encode())
    }

    /// Proxy side: takes the next record once its stamp has landed, whatever
    /// the producer index says ([`Ring::pop_stamped`]). The outer error is
    /// about the ring; the inner one about this record's bytes (it is taken
    /// either way, so one bad record cannot block the queue).
    #[allow(clippy::type_complexity)]
    pub fn pop(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
    ) -> Result<Option<(u64, Result<WorkRecord, DecodeError>)>, QueueError> {
        let mut b = [0u8; RECORD_BYTES];
        Ok(self
            .ring
            .pop_stamped(mem, &mut b)?
            .map(|id| (id, WorkRecord::decode(&b))))
    }
}
