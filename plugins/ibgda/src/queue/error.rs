//! What can go wrong with a queue's bytes, said with the numbers involved.

use std::fmt;

/// A ring operation that could not be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueError {
    /// The slot count is not a power of two in `1..=MAX_SLOTS`.
    BadSlots(u32),
    /// The entry size is not a multiple of 16 of at least 16 bytes.
    BadEntrySize(usize),
    /// The memory given is not the ring's size.
    WrongLength {
        /// [`super::Ring::bytes`].
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// An entry buffer given to push or pop is not one entry long.
    WrongEntryLength {
        /// The ring's entry size.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// The header describes another ring shape (not set up, or the two sides
    /// disagree on the layout).
    LayoutMismatch {
        /// Slot count in the header.
        header_slots: u32,
        /// Entry size in the header.
        header_entry_bytes: u32,
        /// Slot count expected.
        slots: u32,
        /// Entry size expected.
        entry_bytes: usize,
    },
    /// Every slot holds an entry not yet taken: the producer must wait.
    Full {
        /// Slot count.
        slots: u32,
        /// Producer index.
        producer: u64,
        /// Consumer index.
        consumer: u64,
    },
    /// The indices cannot both be right: the consumer is ahead of the producer
    /// or more than a ring behind it.
    IndicesCorrupt {
        /// Producer index read.
        producer: u64,
        /// Consumer index read.
        consumer: u64,
        /// Slot count.
        slots: u32,
    },
    /// The entry the consumer expected carries the stamp of a later lap: the
    /// producer overwrote it before it was taken.
    StampAhead {
        /// The entry index expected.
        index: u64,
        /// The stamp found (index + 1 of the entry that overwrote it).
        stamp: u64,
    },
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::BadSlots(n) => write!(
                f,
                "ring of {n} slots: needs a power of two up to {}",
                super::MAX_SLOTS
            ),
            QueueError::BadEntrySize(n) => {
                write!(f, "entries of {n} bytes: needs a multiple of 16")
            }
            QueueError::WrongLength { expected, got } => {
                write!(f, "ring memory is {got} bytes, the layout needs {expected}")
            }
            QueueError::WrongEntryLength { expected, got } => {
                write!(f, "entry buffer is {got} bytes, entries are {expected}")
            }
            QueueError::LayoutMismatch {
                header_slots,
                header_entry_bytes,
                slots,
                entry_bytes,
            } => write!(
                f,
                "ring header says {header_slots} slots of {header_entry_bytes} bytes, expected {slots} of {entry_bytes}"
            ),
            QueueError::Full {
                slots,
                producer,
                consumer,
            } => write!(
                f,
                "queue full: all {slots} slots hold untaken entries (producer {producer}, consumer {consumer})"
            ),
            QueueError::IndicesCorrupt {
                producer,
                consumer,
                slots,
            } => write!(
                f,
                "ring indices corrupt: producer {producer}, consumer {consumer}, {slots} slots"
            ),
            QueueError::StampAhead { index, stamp } => write!(
                f,
                "entry {index} was overwritten before it was taken (stamp {stamp})"
            ),
        }
    }
}

impl std::error::Error for QueueError {}

/// An entry whose bytes do not describe a valid request or completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The kind byte names no request kind.
    UnknownKind(u8),
    /// A put-with-signal names no signal operation.
    UnknownSignalOp(u8),
    /// An 8-byte word (signal, atomic target) at an offset not a multiple of 8.
    Misaligned {
        /// Which field.
        field: &'static str,
        /// Its offset.
        offset: u64,
    },
    /// A completion's status byte names no status.
    UnknownStatus(u8),
    /// A completion's path bits name no path.
    UnknownPaths(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnknownKind(k) => write!(f, "unknown request kind {k}"),
            DecodeError::UnknownSignalOp(o) => write!(f, "unknown signal operation {o}"),
            DecodeError::Misaligned { field, offset } => {
                write!(f, "{field} offset {offset} is not 8-byte aligned")
            }
            DecodeError::UnknownStatus(s) => write!(f, "unknown completion status {s}"),
            DecodeError::UnknownPaths(p) => write!(f, "unknown path bits {p:#x}"),
        }
    }
}

impl std::error::Error for DecodeError {}
