//! One direction's posted requests: what a send or receive is, and the
//! fixed-capacity table that holds them until they are collected.
//!
//! Messages are numbered 1, 2, … in post order and finish strictly in that
//! order (a FIFO ring, or copies completing in stream order), but the core may test them in any order, so a
//! finished request keeps its result here until it is collected. The entry
//! for `seq` lives at `seq % capacity`; posting fails ("not now") while that
//! entry still holds an uncollected older request. Nothing allocates after
//! construction except error messages.

use crate::{PluginError, PluginResult};

/// Outstanding requests per connection direction.
pub const MAX_OPS: usize = 256;

/// One posted send: the caller's bytes (host or device memory of this process).
#[derive(Debug, Clone, Copy)]
pub struct SendOp {
    /// Source address.
    pub src: u64,
    /// Message length.
    pub len: usize,
}

/// One posted receive.
#[derive(Debug, Clone, Copy)]
pub struct RecvOp<R> {
    /// Destination address (host or device memory of this process).
    pub dst: u64,
    /// Posted size.
    pub len: usize,
    /// The registration holding the whole buffer, if any.
    pub reg: Option<R>,
    /// Its handshake slot was published with a target.
    pub offered: bool,
}

impl<R> RecvOp<R> {
    /// A receive of at most `len` bytes into `dst`.
    pub fn new(dst: u64, len: usize, reg: Option<R>) -> Self {
        RecvOp {
            dst,
            len,
            reg,
            offered: false,
        }
    }
}

#[derive(Debug)]
enum Status {
    Pending,
    Done(usize),
    Failed(PluginError),
}

#[derive(Debug)]
struct Entry<T> {
    /// 0 when free.
    seq: u64,
    /// Dropped by the finishing step, so buffers are released as soon as possible.
    op: Option<T>,
    status: Status,
    /// The request was dropped: free the entry as soon as it finishes.
    abandoned: bool,
}

/// The table.
#[derive(Debug)]
pub struct OpTable<T> {
    entries: Vec<Entry<T>>,
    /// Sequence number the next post gets.
    next: u64,
    /// First sequence number not finished yet (`== next` when idle).
    active: u64,
}

impl<T> OpTable<T> {
    /// A table holding up to `capacity` uncollected requests.
    pub fn new(capacity: usize) -> Self {
        let entries = (0..capacity)
            .map(|_| Entry {
                seq: 0,
                op: None,
                status: Status::Pending,
                abandoned: false,
            })
            .collect();
        OpTable {
            entries,
            next: 1,
            active: 1,
        }
    }

    fn idx(&self, seq: u64) -> usize {
        (seq % self.entries.len() as u64) as usize
    }

    fn entry(&self, seq: u64) -> Option<&Entry<T>> {
        let e = &self.entries[self.idx(seq)];
        (seq != 0 && e.seq == seq).then_some(e)
    }

    /// Queue `op`; its sequence number, or `None` when the table is full.
    pub fn post(&mut self, op: T) -> Option<u64> {
        let seq = self.next;
        let i = self.idx(seq);
        if self.entries[i].seq != 0 {
            return None;
        }
        self.entries[i] = Entry {
            seq,
            op: Some(op),
            status: Status::Pending,
            abandoned: false,
        };
        self.next += 1;
        Some(seq)
    }

    /// The oldest unfinished request.
    pub fn active(&self) -> Option<u64> {
        (self.active < self.next).then_some(self.active)
    }

    /// Sequence number the next post will get.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Unfinished requests.
    pub fn pending(&self) -> u64 {
        self.next - self.active
    }

    /// The unfinished request `seq`.
    pub fn get(&self, seq: u64) -> Option<&T> {
        self.entry(seq).and_then(|e| e.op.as_ref())
    }

    /// The unfinished request `seq`, mutably.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let i = self.idx(seq);
        let e = &mut self.entries[i];
        if seq == 0 || e.seq != seq {
            return None;
        }
        e.op.as_mut()
    }

    /// Finish the active request with `result` and move on to the next.
    pub fn finish_active(&mut self, result: PluginResult<usize>) {
        let Some(seq) = self.active() else { return };
        let i = self.idx(seq);
        let e = &mut self.entries[i];
        debug_assert_eq!(e.seq, seq);
        e.op = None;
        e.status = match result {
            Ok(n) => Status::Done(n),
            Err(err) => Status::Failed(err),
        };
        if e.abandoned {
            e.seq = 0;
        }
        self.active += 1;
    }

    /// Fail every unfinished request with `err`.
    pub fn fail_all(&mut self, err: &PluginError) {
        while self.active().is_some() {
            self.finish_active(Err(err.clone()));
        }
    }

    /// Collect request `seq`: `Ok(None)` while it runs, its result (once) when finished.
    pub fn take(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        let i = self.idx(seq);
        let e = &mut self.entries[i];
        if seq == 0 || e.seq != seq {
            return Err(PluginError::invalid(format!(
                "request #{seq} is unknown or already completed"
            )));
        }
        let result = match std::mem::replace(&mut e.status, Status::Pending) {
            Status::Pending => return Ok(None),
            Status::Done(n) => Ok(Some(n)),
            Status::Failed(err) => Err(err),
        };
        e.seq = 0;
        result
    }

    /// The request handle for `seq` was dropped. Returns true when it had not
    /// finished (its buffer may be gone: the caller must stop using the connection).
    pub fn abandon(&mut self, seq: u64) -> bool {
        let i = self.idx(seq);
        let e = &mut self.entries[i];
        if seq == 0 || e.seq != seq {
            return false;
        }
        if matches!(e.status, Status::Pending) && seq >= self.active {
            e.abandoned = true;
            return true;
        }
        e.seq = 0;
        e.status = Status::Pending;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishes_in_order_collects_in_any_order() {
        let mut t = OpTable::new(4);
        let a = t.post('a').unwrap();
        let b = t.post('b').unwrap();
        assert_eq!((a, b, t.active()), (1, 2, Some(1)));
        assert_eq!(t.take(b).unwrap(), None);
        assert_eq!(t.get(a), Some(&'a'));
        t.finish_active(Ok(10));
        t.finish_active(Ok(20));
        assert_eq!(t.active(), None);
        assert_eq!(t.take(b).unwrap(), Some(20));
        assert_eq!(t.take(a).unwrap(), Some(10));
        assert!(t.take(a).is_err(), "a result is collected once");
    }

    #[test]
    fn full_table_refuses_until_collected() {
        let mut t = OpTable::new(2);
        let a = t.post(0).unwrap();
        t.post(1).unwrap();
        assert_eq!(t.post(2), None);
        t.finish_active(Ok(0));
        assert_eq!(
            t.post(2),
            None,
            "finished but uncollected still occupies its entry"
        );
        t.take(a).unwrap();
        assert_eq!(t.post(2), Some(3));
    }

    #[test]
    fn failures_and_abandonment() {
        let mut t = OpTable::new(8);
        let a = t.post(()).unwrap();
        let b = t.post(()).unwrap();
        let c = t.post(()).unwrap();
        t.finish_active(Ok(1));
        assert!(
            !t.abandon(a),
            "a finished request frees its entry when dropped"
        );
        assert!(t.abandon(b), "dropping a running request is reported");
        t.fail_all(&PluginError::remote("gone"));
        assert_eq!(t.pending(), 0);
        assert!(
            t.take(b).is_err(),
            "abandoned entries vanish when they finish"
        );
        assert_eq!(t.take(c).unwrap_err().message(), "gone");
        assert_eq!(t.post(()), Some(4));
    }
}
