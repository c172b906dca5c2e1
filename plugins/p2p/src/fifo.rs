//! The FIFO's flags: which device slot holds which chunk, and when a slot is free.
//!
//! The bytes are in the receiver's device memory (`nslots × chunk`, allocated
//! with `cuMemAlloc` by the receiver, opened by the sender through its IPC
//! handle); the flags are in the shared host segment. Chunk `n` (counting
//! from 0 over the connection's life) uses slot `n % nslots`.
//!
//! * Sender ([`Producer`]): may fill chunk `n` once `n - tail < nslots` (the
//!   receiver copied chunk `n - nslots` out; `tail` loaded with Acquire). It
//!   queues the copy into the slot on its stream with an event; when the event
//!   completed it writes the slot header and stores `stamp = n + 1` (Release).
//!   Stamps are published in chunk order.
//! * Receiver ([`Consumer`]): chunk `n` is there when slot `n % nslots` has
//!   `stamp == n + 1` (Acquire). It queues the copy out of the slot (possibly
//!   for several chunks ahead); when that copy's event completed it stores
//!   `tail = n + 1` (Release), in chunk order, handing the slot back.
//!
//! A stamp names its chunk number, so a slot still holding chunk `n - nslots`
//! is never taken for chunk `n`. Nothing here allocates.

use crate::segment::Segment;
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
    pub fn reserve(&mut self, seg: &Segment) -> Option<(u64, usize)> {
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

    /// Announce chunk `chunk` (its bytes are in the slot).
    pub fn publish(seg: &Segment, chunk: u64, hdr: ChunkHeader) {
        let h = seg.slot((chunk % seg.layout().nslots as u64) as usize);
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
    pub fn peek(&self, seg: &Segment) -> Option<(u64, usize, ChunkHeader)> {
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

    /// The peeked chunk is being handled (its copy out is queued).
    pub fn advance(&mut self) {
        self.next += 1;
    }

    /// Hand the oldest handled chunk's slot back (its copy out completed).
    pub fn pop(&mut self, seg: &Segment) {
        debug_assert!(self.tail < self.next, "pop of a chunk never peeked");
        self.tail += 1;
        seg.header().tail.0.store(self.tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn pair(tag: &str, nslots: usize) -> (Segment, Segment) {
        let name = format!("/ferrocx-p2ptest-{}-fifo-{tag}", std::process::id());
        let layout = Layout::new(nslots, 4096).unwrap();
        let a = Segment::create(&name, layout).unwrap();
        let b = Segment::open(&name, layout).unwrap();
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
                Producer::publish(&tx, n, hdr(round * 3 + n % 3 + 1));
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
        Producer::publish(&tx, n0, hdr(1));
        Producer::publish(&tx, n1, hdr(2));
        c.peek(&rx).unwrap();
        c.advance();
        assert!(p.reserve(&tx).is_none(), "peeked is not consumed");
        c.pop(&rx);
        assert_eq!(p.reserve(&tx), Some((2, 0)));
    }
}
