//! The chunk ring: a single-producer single-consumer queue of `nslots` slots.
//!
//! Slot `n % nslots` holds chunk `n`. The sender fills the slot (payload, or
//! up to [`INLINE`] bytes inside the [`SlotHeader`](crate::layout::SlotHeader)
//! itself, then the header fields) and publishes it by storing `stamp = n + 1`
//! (Release). The receiver polls the stamp of the slot it expects next
//! (Acquire): one cache line announces and, for small messages, carries the
//! chunk. After copying the payload out it stores `tail` (Release), which the
//! sender loads (Acquire) before reusing a slot; the sender keeps the last
//! `tail` it saw, so a non-full ring costs it no shared load. Nothing here allocates.

use crate::layout::INLINE;
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
    head: u64,
    tail_seen: u64,
}

impl Producer {
    /// A producer for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a slot is free (refreshes the receiver's counter only when needed).
    pub fn has_room(&mut self, seg: &Segment) -> bool {
        let n = seg.layout().nslots as u64;
        if self.head - self.tail_seen < n {
            return true;
        }
        self.tail_seen = seg.header().tail.0.load(Ordering::Acquire);
        self.head - self.tail_seen < n
    }

    /// Publish one chunk (`data.len() == hdr.len`, at most a chunk); false when the ring is full.
    pub fn push(&mut self, seg: &Segment, hdr: ChunkHeader, data: &[u8]) -> bool {
        debug_assert_eq!(hdr.len, data.len() as u64);
        if !self.has_room(seg) {
            return false;
        }
        let i = (self.head % seg.layout().nslots as u64) as usize;
        let h = seg.slot_header(i);
        if data.len() <= INLINE {
            for (word, bytes) in h.inline.iter().zip(data.chunks(8)) {
                let mut w = [0u8; 8];
                w[..bytes.len()].copy_from_slice(bytes);
                word.store(u64::from_le_bytes(w), Ordering::Relaxed);
            }
        } else {
            seg.write_slot(i, data);
        }
        h.seq.store(hdr.seq, Ordering::Relaxed);
        h.total.store(hdr.total, Ordering::Relaxed);
        h.offset.store(hdr.offset, Ordering::Relaxed);
        h.len.store(hdr.len, Ordering::Relaxed);
        self.head += 1;
        h.stamp.store(self.head, Ordering::Release);
        true
    }
}

/// The receiver's end.
#[derive(Debug, Default)]
pub struct Consumer {
    tail: u64,
    /// Length of the chunk `peek` returned (where `read` finds its bytes).
    peeked_len: u64,
}

impl Consumer {
    /// A consumer for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// The header of the oldest unconsumed chunk, if any.
    pub fn peek(&mut self, seg: &Segment) -> Option<ChunkHeader> {
        let h = seg.slot_header(self.slot(seg));
        if h.stamp.load(Ordering::Acquire) != self.tail + 1 {
            return None;
        }
        let len = h.len.load(Ordering::Relaxed);
        self.peeked_len = len;
        Some(ChunkHeader {
            seq: h.seq.load(Ordering::Relaxed),
            total: h.total.load(Ordering::Relaxed),
            offset: h.offset.load(Ordering::Relaxed),
            len,
        })
    }

    /// Copy the first `dst.len()` payload bytes of the chunk `peek` returned.
    pub fn read(&self, seg: &Segment, dst: &mut [u8]) {
        let i = self.slot(seg);
        if self.peeked_len as usize <= INLINE {
            let h = seg.slot_header(i);
            for (bytes, word) in dst.chunks_mut(8).zip(h.inline.iter()) {
                let w = word.load(Ordering::Relaxed).to_le_bytes();
                bytes.copy_from_slice(&w[..bytes.len()]);
            }
        } else {
            seg.read_slot(i, dst);
        }
    }

    /// Hand the peeked chunk's slot back to the sender (after its bytes were copied out).
    pub fn pop(&mut self, seg: &Segment) {
        self.tail += 1;
        seg.header().tail.0.store(self.tail, Ordering::Release);
    }

    fn slot(&self, seg: &Segment) -> usize {
        (self.tail % seg.layout().nslots as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn pair(tag: &str, nslots: usize, chunk: usize) -> (Segment, Segment) {
        let name = format!("/ferrocx-test-{}-ring-{tag}", std::process::id());
        let layout = Layout::new(nslots, chunk).unwrap();
        let mut a = Segment::create(&name, layout).unwrap();
        let b = Segment::open(&name, layout).unwrap();
        a.unlink().unwrap();
        (a, b)
    }

    fn hdr(seq: u64, len: usize) -> ChunkHeader {
        ChunkHeader {
            seq,
            total: len as u64,
            offset: 0,
            len: len as u64,
        }
    }

    #[test]
    fn fills_drains_and_wraps() {
        let (tx_seg, rx_seg) = pair("wrap", 4, 64);
        let (mut tx, mut rx) = (Producer::new(), Consumer::new());
        assert_eq!(rx.peek(&rx_seg), None);
        for round in 0..5u64 {
            for k in 0..4u64 {
                let seq = round * 4 + k + 1;
                let data = [seq as u8; 10];
                assert!(tx.push(&tx_seg, hdr(seq, 10), &data));
            }
            assert!(
                !tx.push(&tx_seg, hdr(99, 1), &[0]),
                "ring of 4 is full after 4 pushes"
            );
            for k in 0..4u64 {
                let seq = round * 4 + k + 1;
                let h = rx.peek(&rx_seg).unwrap();
                assert_eq!(h, hdr(seq, 10));
                let mut out = [0u8; 10];
                rx.read(&rx_seg, &mut out);
                assert_eq!(out, [seq as u8; 10]);
                rx.pop(&rx_seg);
            }
            assert_eq!(rx.peek(&rx_seg), None);
        }
        assert_eq!((tx.head, rx.tail), (20, 20));
    }

    #[test]
    fn concurrent_producer_and_consumer_agree() {
        let (tx_seg, rx_seg) = pair("threads", 3, 128);
        const N: u64 = 20_000;
        let t = std::thread::spawn(move || {
            let mut tx = Producer::new();
            let mut seq = 1;
            while seq <= N {
                let len = (seq % 129) as usize;
                let data: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
                if tx.push(&tx_seg, hdr(seq, len), &data) {
                    seq += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut rx = Consumer::new();
        let mut expect = 1;
        let mut buf = [0u8; 128];
        while expect <= N {
            let Some(h) = rx.peek(&rx_seg) else {
                std::thread::yield_now();
                continue;
            };
            assert_eq!(h.seq, expect);
            let len = h.len as usize;
            rx.read(&rx_seg, &mut buf[..len]);
            assert!(buf[..len]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (expect as usize + i) as u8));
            rx.pop(&rx_seg);
            expect += 1;
        }
        t.join().unwrap();
    }
}
