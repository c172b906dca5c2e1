//! Revocations: the receiver tells the sender to close its mapping of an
//! allocation (deregistered, freed, or dropped from the export cache), so a
//! sender does not keep the receiver's memory alive with a stale mapping.
//!
//! In the segment, a single-producer single-consumer ring of handles:
//! the receiver writes entry `head % NREVOKE` then raises `revoke_head.head`
//! (Release); the sender, on each progress round, compares it with its own
//! cursor (one load), closes the named mappings and raises `revoke_tail`
//! (Release). When the ring is full (the sender has not progressed), the
//! receiver bumps `revoke_head.flush` instead: the sender then drops every
//! cached mapping (they are reopened on demand). Nothing waits: a revocation
//! takes effect at the sender's next progress round or when it frees the
//! connection.
//!
//! In the plugin context, [`Revocations`] collects revocations from any
//! thread (the export cache, `deregister`) and every receiving connection
//! forwards the entries it has not seen into its segment.

use super::regslot::WriteTarget;
use super::segment::Segment;
use crate::device::{IpcHandle, HANDLE_BYTES};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Entries in a segment's revocation ring (back ends that revoke).
pub const NREVOKE: usize = 32;

/// Revocations kept for receiving connections that have not forwarded them yet.
const LOG_KEEP: usize = 1024;

/// What the sender must drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The mapping of this handle.
    One(IpcHandle),
    /// Every cached mapping.
    All,
}

/// The receiver's end of a segment's ring.
#[derive(Debug, Default)]
pub struct Writer {
    head: u64,
    flush: u64,
}

impl Writer {
    /// Publish `h`; when the ring is full, ask for a flush instead.
    pub fn push<T: WriteTarget>(&mut self, seg: &Segment<T>, h: &IpcHandle) {
        let n = seg.layout().nrevoke as u64;
        let tail = seg.header().revoke_tail.0.load(Ordering::Acquire);
        if self.head - tail >= n {
            self.flush_all(seg);
            return;
        }
        let e = seg.revoke((self.head % n) as usize);
        for (w, v) in e.handle.iter().zip(h.to_words()) {
            w.store(v, Ordering::Relaxed);
        }
        self.head += 1;
        seg.header()
            .revoke_head
            .0
            .head
            .store(self.head, Ordering::Release);
    }

    /// Ask the sender to drop every mapping.
    pub fn flush_all<T: WriteTarget>(&mut self, seg: &Segment<T>) {
        self.flush += 1;
        seg.header()
            .revoke_head
            .0
            .flush
            .store(self.flush, Ordering::Release);
    }
}

/// The sender's end of a segment's ring.
#[derive(Debug, Default)]
pub struct Reader {
    tail: u64,
    flush: u64,
}

impl Reader {
    /// Hand every new revocation to `f`; true if there was any.
    pub fn poll<T: WriteTarget>(&mut self, seg: &Segment<T>, mut f: impl FnMut(Revoked)) -> bool {
        let hdr = seg.header();
        let head = hdr.revoke_head.0.head.load(Ordering::Acquire);
        let flush = hdr.revoke_head.0.flush.load(Ordering::Acquire);
        if head == self.tail && flush == self.flush {
            return false;
        }
        let n = seg.layout().nrevoke as u64;
        while self.tail < head {
            let e = seg.revoke((self.tail % n) as usize);
            let mut words = [0u64; HANDLE_BYTES / 8];
            for (v, w) in words.iter_mut().zip(&e.handle) {
                *v = w.load(Ordering::Relaxed);
            }
            f(Revoked::One(IpcHandle::from_words(&words)));
            self.tail += 1;
        }
        hdr.revoke_tail.0.store(self.tail, Ordering::Release);
        if flush != self.flush {
            self.flush = flush;
            f(Revoked::All);
        }
        true
    }
}

/// Revocations of one plugin context, for its receiving connections to forward.
#[derive(Debug)]
pub struct RevokeLog {
    /// (number, handle), oldest first.
    entries: VecDeque<(u64, IpcHandle)>,
    next: u64,
    keep: usize,
}

/// What a connection must forward.
#[derive(Debug, PartialEq, Eq)]
pub enum Pending {
    /// Nothing new.
    Nothing,
    /// These handles (and the cursor to remember).
    Some(Vec<IpcHandle>, u64),
    /// More than the log kept: flush everything (and the cursor to remember).
    Flush(u64),
}

impl RevokeLog {
    /// A log keeping the last `keep` revocations.
    pub fn new(keep: usize) -> Self {
        RevokeLog {
            entries: VecDeque::new(),
            next: 0,
            keep: keep.max(1),
        }
    }

    /// Record a revocation.
    pub fn push(&mut self, h: IpcHandle) {
        if self.entries.len() >= self.keep {
            self.entries.pop_front();
        }
        self.entries.push_back((self.next, h));
        self.next += 1;
    }

    /// The cursor of a connection that has seen everything so far.
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// What a connection whose cursor is `from` has not seen yet.
    pub fn since(&self, from: u64) -> Pending {
        if from >= self.next {
            return Pending::Nothing;
        }
        match self.entries.front() {
            Some(&(oldest, _)) if oldest <= from => Pending::Some(
                self.entries
                    .iter()
                    .filter(|(n, _)| *n >= from)
                    .map(|(_, h)| *h)
                    .collect(),
                self.next,
            ),
            _ => Pending::Flush(self.next),
        }
    }
}

/// A receiving connection, as the context reaches it to forward revocations
/// into its segment at once (when a registration ends).
pub trait Forwarder: Send + Sync {
    /// Forward what the connection has not forwarded yet.
    fn forward_revocations(&self);
}

/// A plugin context's revocations, shared by every thread that may withdraw
/// a handle and every receiving connection that forwards them.
#[derive(Debug)]
pub struct Revocations {
    log: Mutex<RevokeLog>,
    /// The log's cursor, readable without the lock.
    cursor: AtomicU64,
}

impl Default for Revocations {
    fn default() -> Self {
        Revocations {
            log: Mutex::new(RevokeLog::new(LOG_KEEP)),
            cursor: AtomicU64::new(0),
        }
    }
}

impl Revocations {
    /// Record withdrawn handles; whether there were any.
    pub fn push(&self, handles: Vec<IpcHandle>) -> bool {
        if handles.is_empty() {
            return false;
        }
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        for h in handles {
            log.push(h);
        }
        self.cursor.store(log.cursor(), Ordering::Release);
        true
    }

    /// The cursor a new receiving connection starts from.
    pub fn cursor(&self) -> u64 {
        self.cursor.load(Ordering::Acquire)
    }

    /// Revocations after `cursor` (one load when there are none).
    pub fn since(&self, cursor: u64) -> Pending {
        if self.cursor.load(Ordering::Acquire) == cursor {
            return Pending::Nothing;
        }
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .since(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::layout::Layout;

    fn h(b: u8) -> IpcHandle {
        IpcHandle([b; HANDLE_BYTES])
    }

    fn pair(tag: &str) -> (Segment<u64>, Segment<u64>) {
        let name = format!("/ferrocx-test-{}-rev-{tag}", std::process::id());
        let layout = Layout::new(2, 4096, 4, 64, 4, false).unwrap();
        let a = Segment::create(&name, layout).unwrap();
        let b = Segment::open(&name, layout).unwrap();
        (a, b)
    }

    #[test]
    fn ring_delivers_in_order_and_flushes_when_full() {
        let (rx, tx) = pair("ring");
        let (mut w, mut r) = (Writer::default(), Reader::default());
        let mut got = Vec::new();
        assert!(!r.poll(&tx, |x| got.push(x)));
        w.push(&rx, &h(1));
        w.push(&rx, &h(2));
        assert!(r.poll(&tx, |x| got.push(x)));
        assert_eq!(got, vec![Revoked::One(h(1)), Revoked::One(h(2))]);
        got.clear();
        for b in 3..=8 {
            w.push(&rx, &h(b)); // 4 fit, then the ring is full
        }
        r.poll(&tx, |x| got.push(x));
        assert_eq!(
            got,
            vec![
                Revoked::One(h(3)),
                Revoked::One(h(4)),
                Revoked::One(h(5)),
                Revoked::One(h(6)),
                Revoked::All
            ]
        );
        got.clear();
        w.push(&rx, &h(9));
        r.poll(&tx, |x| got.push(x));
        assert_eq!(
            got,
            vec![Revoked::One(h(9))],
            "room again after the sender caught up"
        );
    }

    #[test]
    fn log_hands_out_what_each_cursor_missed() {
        let mut log = RevokeLog::new(3);
        let c0 = log.cursor();
        assert_eq!(log.since(c0), Pending::Nothing);
        log.push(h(1));
        log.push(h(2));
        assert_eq!(log.since(c0), Pending::Some(vec![h(1), h(2)], 2));
        assert_eq!(log.since(1), Pending::Some(vec![h(2)], 2));
        log.push(h(3));
        log.push(h(4));
        assert_eq!(log.since(c0), Pending::Flush(4), "entry 0 was dropped");
        assert_eq!(log.since(1), Pending::Some(vec![h(2), h(3), h(4)], 4));
        assert_eq!(log.since(4), Pending::Nothing);
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;

    #[test]
    fn the_shared_log_is_cheap_when_idle() {
        let r = Revocations::default();
        let c = r.cursor();
        assert_eq!(r.since(c), Pending::Nothing);
        assert!(!r.push(Vec::new()));
        assert!(r.push(vec![IpcHandle([1; HANDLE_BYTES])]));
        assert_eq!(
            r.since(c),
            Pending::Some(vec![IpcHandle([1; HANDLE_BYTES])], 1)
        );
        assert_eq!(r.since(r.cursor()), Pending::Nothing);
    }
}
