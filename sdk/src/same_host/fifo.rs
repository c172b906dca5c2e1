//! The FIFO's flags: which slot holds which chunk, and when a slot is free.
//!
//! The bytes are in the FIFO (`nslots × chunk`: in the segment itself for
//! host back ends, in the receiver's device memory for p2p, which the sender
//! opens through its IPC handle); the flags are in the shared segment.
//! Chunk `n` (counting from 0 over the connection's life) uses slot `n % nslots`.
//!
//! * Sender ([`Producer`]): may fill chunk `n` once `n - tail < nslots` (the
//!   receiver copied chunk `n - nslots` out; `tail` loaded with Acquire, and
//!   only when the last value seen says the FIFO is full). Once the chunk's
//!   bytes are in the slot (its copy completed) it writes the slot header —
//!   and the payload itself for a chunk of at most [`INLINE_BYTES`] on back
//!   ends that carry them inline — and stores `stamp = n + 1` (Release).
//!   Stamps are published in chunk order.
//! * Receiver ([`Consumer`]): chunk `n` is there when slot `n % nslots` has
//!   `stamp == n + 1` (Acquire): one cache line announces and, for small
//!   messages, carries the chunk. It copies the chunk out (possibly queueing
//!   copies for several chunks ahead); once that copy completed it stores
//!   `tail = n + 1` (Release), in chunk order, handing the slot back.
//!
//! A stamp names its chunk number, so a slot still holding chunk `n - nslots`
//! is never taken for chunk `n`. Nothing here allocates.

use super::layout::INLINE_BYTES;
use super::regslot::WriteTarget;
use super::segment::Segment;
use std::sync::atomic::Ordering;

/// Description of one chunk of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Message sequence number (1-based, per connection).
    pub seq: u64,
    /// Total length of the message.
    pub total: u64,
    /// Offset of this chunk in the message.
    pub offset: u64,
    /// Bytes in this chunk.
    pub len: u64,
}

/// A chunk's inline payload as the slot header stores it.
pub type InlineWords = [u64; INLINE_BYTES / 8];

/// Pack at most [`INLINE_BYTES`] into words (little-endian, zero padded).
pub fn pack_inline(bytes: &[u8]) -> InlineWords {
    debug_assert!(bytes.len() <= INLINE_BYTES);
    let mut words = [0u64; INLINE_BYTES / 8];
    for (w, b) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut le = [0u8; 8];
        le[..b.len()].copy_from_slice(b);
        *w = u64::from_le_bytes(le);
    }
    words
}

/// The first `out.len()` bytes of packed words.
pub fn unpack_inline(words: &InlineWords, out: &mut [u8]) {
    for (b, w) in out.chunks_mut(8).zip(words) {
        b.copy_from_slice(&w.to_le_bytes()[..b.len()]);
    }
}

/// The sender's end.
#[derive(Debug, Default)]
pub struct Producer {
    /// Chunks reserved (their copies queued).
    next: u64,
    /// Last `tail` read from the segment.
    tail_seen: u64,
}

impl Producer {
    /// Reserve the next chunk if its slot is free: (chunk number, slot index).
    pub fn reserve<T: WriteTarget>(&mut self, seg: &Segment<T>) -> Option<(u64, usize)> {
        let n = seg.layout().nslots as u64;
        if self.next - self.tail_seen >= n {
            self.tail_seen = seg.header().tail.0.load(Ordering::Acquire);
            if self.next - self.tail_seen >= n {
                return None;
            }
        }
        let chunk = self.next;
        self.next += 1;
        Some((chunk, (chunk % n) as usize))
    }

    /// Announce chunk `chunk` (its bytes are in the slot, or in `inline`).
    pub fn publish<T: WriteTarget>(
        seg: &Segment<T>,
        chunk: u64,
        hdr: ChunkHeader,
        inline: Option<&InlineWords>,
    ) {
        let h = seg.slot((chunk % seg.layout().nslots as u64) as usize);
        if let Some(words) = inline {
            for (cell, w) in h.inline.iter().zip(words) {
                cell.store(*w, Ordering::Relaxed);
            }
        }
        h.seq.store(hdr.seq, Ordering::Relaxed);
        h.total.store(hdr.total, Ordering::Relaxed);
        h.offset.store(hdr.offset, Ordering::Relaxed);
        h.len.store(hdr.len, Ordering::Relaxed);
        h.stamp.store(chunk + 1, Ordering::Release);
    }
}

/// The receiver's end.
#[derive(Debug, Default)]
pub struct Consumer {
    /// Chunks looked at (copies queued or skipped).
    next: u64,
    /// Chunks handed back to the sender.
    tail: u64,
}

impl Consumer {
    /// The next chunk not looked at yet, if published: (chunk number, slot, header).
    pub fn peek<T: WriteTarget>(&self, seg: &Segment<T>) -> Option<(u64, usize, ChunkHeader)> {
        let i = (self.next % seg.layout().nslots as u64) as usize;
        let h = seg.slot(i);
        if h.stamp.load(Ordering::Acquire) != self.next + 1 {
            return None;
        }
        Some((
            self.next,
            i,
            ChunkHeader {
                seq: h.seq.load(Ordering::Relaxed),
                total: h.total.load(Ordering::Relaxed),
                offset: h.offset.load(Ordering::Relaxed),
                len: h.len.load(Ordering::Relaxed),
            },
        ))
    }

    /// The inline payload of the chunk in slot `slot` (after `peek` saw it).
    pub fn inline<T: WriteTarget>(seg: &Segment<T>, slot: usize) -> InlineWords {
        let h = seg.slot(slot);
        let mut words = [0u64; INLINE_BYTES / 8];
        for (w, cell) in words.iter_mut().zip(&h.inline) {
            *w = cell.load(Ordering::Relaxed);
        }
        words
    }

    /// The peeked chunk is being handled (its copy out is queued).
    pub fn advance(&mut self) {
        self.next += 1;
    }

    /// Hand the oldest handled chunk's slot back (its copy out completed).
    pub fn pop<T: WriteTarget>(&mut self, seg: &Segment<T>) {
        debug_assert!(self.tail < self.next, "pop of a chunk never peeked");
        self.tail += 1;
        seg.header().tail.0.store(self.tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::layout::Layout;

    type Seg = Segment<u64>;

    fn pair(tag: &str, nslots: usize) -> (Seg, Seg) {
        let name = format!("/ferrocx-test-{}-fifo-{tag}", std::process::id());
        let layout = Layout::new(nslots, 4096, 4, 64, 0, false).unwrap();
        let a = Seg::create(&name, layout).unwrap();
        let b = Seg::open(&name, layout).unwrap();
        (a, b)
    }

    fn hdr(seq: u64) -> ChunkHeader {
        ChunkHeader {
            seq,
            total: 10,
            offset: 0,
            len: 10,
        }
    }

    #[test]
    fn slots_cycle_and_stamps_name_chunks() {
        let (rx, tx) = pair("cycle", 3);
        let (mut p, mut c) = (Producer::default(), Consumer::default());
        for round in 0..4u64 {
            let mut reserved = Vec::new();
            while let Some(r) = p.reserve(&tx) {
                reserved.push(r);
            }
            assert_eq!(reserved.len(), 3, "three slots per round");
            assert!(c.peek(&rx).is_none(), "nothing published yet");
            for &(n, slot) in &reserved {
                assert_eq!(slot as u64, n % 3);
                Producer::publish(&tx, n, hdr(round * 3 + n % 3 + 1), None);
            }
            for k in 0..3 {
                let (n, _, h) = c.peek(&rx).unwrap();
                assert_eq!(n, round * 3 + k);
                assert_eq!(h.seq, round * 3 + k + 1);
                c.advance();
            }
            assert!(c.peek(&rx).is_none());
            for _ in 0..3 {
                c.pop(&rx);
            }
        }
    }

    #[test]
    fn producer_waits_for_the_consumer() {
        let (rx, tx) = pair("wait", 2);
        let (mut p, mut c) = (Producer::default(), Consumer::default());
        let (n0, _) = p.reserve(&tx).unwrap();
        let (n1, _) = p.reserve(&tx).unwrap();
        assert!(p.reserve(&tx).is_none());
        Producer::publish(&tx, n0, hdr(1), None);
        Producer::publish(&tx, n1, hdr(2), None);
        c.peek(&rx).unwrap();
        c.advance();
        assert!(p.reserve(&tx).is_none(), "peeked is not consumed");
        c.pop(&rx);
        assert_eq!(p.reserve(&tx), Some((2, 0)));
    }

    #[test]
    fn inline_payloads_ride_in_the_header() {
        let (rx, tx) = pair("inline", 2);
        let (mut p, c) = (Producer::default(), Consumer::default());
        let (n, slot) = p.reserve(&tx).unwrap();
        let data: Vec<u8> = (1..=21).collect();
        Producer::publish(&tx, n, hdr(1), Some(&pack_inline(&data)));
        let (_, s, _) = c.peek(&rx).unwrap();
        assert_eq!(s, slot);
        let mut out = [0u8; 21];
        unpack_inline(&Consumer::inline(&rx, s), &mut out);
        assert_eq!(&out[..], &data[..]);
    }

    #[test]
    fn concurrent_producer_and_consumer_agree() {
        let (rx, tx) = pair("threads", 3);
        const N: u64 = 20_000;
        let t = std::thread::spawn(move || {
            let mut p = Producer::default();
            let mut seq = 1;
            while seq <= N {
                let Some((n, _)) = p.reserve(&tx) else {
                    std::thread::yield_now();
                    continue;
                };
                let len = (seq % 25) as usize;
                let data: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
                let h = ChunkHeader {
                    seq,
                    total: len as u64,
                    offset: 0,
                    len: len as u64,
                };
                Producer::publish(&tx, n, h, Some(&pack_inline(&data)));
                seq += 1;
            }
        });
        let mut c = Consumer::default();
        let mut expect = 1;
        let mut buf = [0u8; INLINE_BYTES];
        while expect <= N {
            let Some((_, slot, h)) = c.peek(&rx) else {
                std::thread::yield_now();
                continue;
            };
            assert_eq!(h.seq, expect);
            let len = h.len as usize;
            unpack_inline(&Consumer::inline(&rx, slot), &mut buf[..len]);
            assert!(buf[..len]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (expect as usize + i) as u8));
            c.advance();
            c.pop(&rx);
            expect += 1;
        }
        t.join().unwrap();
    }
}
