//! Where reader threads leave what arrives: messages queued per (peer, tag), plus what is
//! known about each peer (alive, left cleanly, dead) and the first abort notice.
//!
//! One mutex and one condvar: waiters are few (the bootstrap is not a data path), and
//! every event that can end a wait — a message, a death, an abort, local close — wakes all
//! of them so each re-checks its own condition.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Callback fired when a peer dies or an abort notice arrives.
pub(crate) type Hook = Box<dyn Fn() + Send + Sync>;

/// Answers a query (from peer, its payload) on the reader thread instead of queueing it:
/// status queries must be answered while the rank's program is busy elsewhere.
pub(crate) type Responder = Box<dyn Fn(usize, Vec<u8>) + Send + Sync>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum PeerState {
    Alive,
    /// Sent a goodbye frame: closed its communicator on purpose.
    Left,
    /// Connection lost without goodbye; the description says who and how.
    Dead(String),
}

#[derive(Default)]
struct State {
    queues: HashMap<(usize, u64), VecDeque<Vec<u8>>>,
    peers: Vec<PeerState>,
    first_dead: Option<(usize, String)>,
    abort: Option<(usize, String)>,
    closed: bool,
}

/// Why a wait ended without a message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitError {
    /// The awaited peer died; its description.
    PeerDead(String),
    /// The awaited peer closed its communicator cleanly.
    PeerLeft,
    /// Some peer (rank, reason) aborted the communicator.
    Aborted(usize, String),
    /// This side was closed.
    Closed,
    /// The deadline passed.
    Timeout,
}

pub(crate) struct Mailbox {
    state: Mutex<State>,
    cond: Condvar,
    hook: OnceLock<Hook>,
    /// Messages on this tag go to the responder, not to a queue.
    responder: OnceLock<(u64, Responder)>,
    /// Set before this side shuts its sockets, so readers take the EOF they then see for
    /// our own doing rather than a dead peer.
    closing: AtomicBool,
}

impl Mailbox {
    pub fn new(nranks: usize) -> Self {
        let state = State {
            peers: vec![PeerState::Alive; nranks],
            ..State::default()
        };
        Mailbox {
            state: Mutex::new(state),
            cond: Condvar::new(),
            hook: OnceLock::new(),
            responder: OnceLock::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Queue a message from `peer`. Dropped if this side is closed.
    pub fn deliver(&self, peer: usize, tag: u64, data: Vec<u8>) {
        if let Some((t, answer)) = self.responder.get() {
            if *t == tag {
                if !self.is_closing() {
                    answer(peer, data);
                }
                return;
            }
        }
        let mut st = self.state.lock();
        if st.closed {
            return;
        }
        st.queues.entry((peer, tag)).or_default().push_back(data);
        drop(st);
        self.cond.notify_all();
    }

    /// Record that `peer` died; the first death is kept for [`first_dead`](Self::first_dead).
    pub fn peer_dead(&self, peer: usize, detail: String) {
        {
            let mut st = self.state.lock();
            if st.peers[peer] != PeerState::Alive {
                return;
            }
            st.peers[peer] = PeerState::Dead(detail.clone());
            st.first_dead.get_or_insert((peer, detail));
        }
        // Hook first: a waiter woken by this event then finds the hook already run.
        self.fire_hook();
        self.cond.notify_all();
    }

    /// Record that `peer` said goodbye.
    pub fn peer_left(&self, peer: usize) {
        {
            let mut st = self.state.lock();
            if st.peers[peer] == PeerState::Alive {
                st.peers[peer] = PeerState::Left;
            }
        }
        self.cond.notify_all();
    }

    /// Record an abort notice from `peer`; only the first is kept.
    pub fn abort_from(&self, peer: usize, reason: String) {
        {
            let mut st = self.state.lock();
            if st.abort.is_some() {
                return;
            }
            st.abort = Some((peer, reason));
        }
        self.fire_hook();
        self.cond.notify_all();
    }

    /// Mark that this side is shutting its sockets (see [`is_closing`](Self::is_closing)).
    pub fn begin_close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// This side is closed: waiters return [`WaitError::Closed`], queued messages are dropped.
    pub fn close(&self) {
        self.begin_close();
        {
            let mut st = self.state.lock();
            st.closed = true;
            st.queues.clear();
        }
        self.cond.notify_all();
    }

    pub fn first_dead(&self) -> Option<(usize, String)> {
        self.state.lock().first_dead.clone()
    }

    pub fn abort_notice(&self) -> Option<(usize, String)> {
        self.state.lock().abort.clone()
    }

    /// Whether `peer` can still be sent to (not dead, not gone, we are not closed).
    pub fn check_peer(&self, peer: usize) -> Result<(), WaitError> {
        let st = self.state.lock();
        if st.closed {
            return Err(WaitError::Closed);
        }
        match &st.peers[peer] {
            PeerState::Alive => Ok(()),
            PeerState::Left => Err(WaitError::PeerLeft),
            PeerState::Dead(d) => Err(WaitError::PeerDead(d.clone())),
        }
    }

    /// For every rank, whether it is known dead or gone.
    pub fn gone(&self) -> Vec<bool> {
        let st = self.state.lock();
        st.peers.iter().map(|p| *p != PeerState::Alive).collect()
    }

    /// Whether `peer` is known dead or gone (abort notices are not sent to those).
    pub fn peer_gone(&self, peer: usize) -> bool {
        self.state.lock().peers[peer] != PeerState::Alive
    }

    /// Take the oldest message from `peer` with `tag`, waiting until `deadline`.
    ///
    /// Messages that already arrived are delivered even if the peer died or aborted since:
    /// they were sent while it was healthy.
    pub fn wait(&self, peer: usize, tag: u64, deadline: Instant) -> Result<Vec<u8>, WaitError> {
        self.wait_for(peer, tag, deadline, true)
    }

    /// [`wait`](Self::wait), going on after an abort notice: for exchanges that must
    /// work on a communicator that already failed (hang reports, agreeing on survivors).
    pub fn wait_despite_abort(
        &self,
        peer: usize,
        tag: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>, WaitError> {
        self.wait_for(peer, tag, deadline, false)
    }

    fn wait_for(
        &self,
        peer: usize,
        tag: u64,
        deadline: Instant,
        heed_abort: bool,
    ) -> Result<Vec<u8>, WaitError> {
        self.wait_any(&[(peer, tag)], deadline, heed_abort)
            .map(|(_, m)| m)
            .map_err(|(_, e)| e)
    }

    /// Take the oldest message of the first of `keys` (peer, tag) that has one,
    /// waiting until `deadline`: its index in `keys` and the message. A failure
    /// comes with the index of the key it concerns (a dead or departed peer's;
    /// 0 for an abort, a close or the deadline). For waits on several peers at
    /// once: connection setup takes requests and answers in the order they come.
    pub fn wait_any(
        &self,
        keys: &[(usize, u64)],
        deadline: Instant,
        heed_abort: bool,
    ) -> Result<(usize, Vec<u8>), (usize, WaitError)> {
        let mut st = self.state.lock();
        loop {
            if st.closed {
                return Err((0, WaitError::Closed));
            }
            for (i, key) in keys.iter().enumerate() {
                if let Some(q) = st.queues.get_mut(key) {
                    if let Some(m) = q.pop_front() {
                        if q.is_empty() {
                            st.queues.remove(key);
                        }
                        return Ok((i, m));
                    }
                }
            }
            for (i, &(peer, _)) in keys.iter().enumerate() {
                if let PeerState::Dead(d) = &st.peers[peer] {
                    return Err((i, WaitError::PeerDead(d.clone())));
                }
            }
            // An abort notice explains a peer that then left: a rank that aborts sends its
            // notice before its goodbye, so the notice is the cause to report.
            if let Some((from, reason)) = st.abort.as_ref().filter(|_| heed_abort) {
                return Err((0, WaitError::Aborted(*from, reason.clone())));
            }
            if let Some(i) = keys
                .iter()
                .position(|&(p, _)| st.peers[p] == PeerState::Left)
            {
                return Err((i, WaitError::PeerLeft));
            }
            if self.cond.wait_until(&mut st, deadline).timed_out() {
                // One last look: the event may have landed right at the deadline.
                if keys
                    .iter()
                    .any(|k| st.queues.get(k).is_some_and(|q| !q.is_empty()))
                {
                    continue;
                }
                return Err((0, WaitError::Timeout));
            }
        }
    }

    /// Send messages tagged `tag` to `answer` (once; `false` if one was set).
    pub fn set_responder(&self, tag: u64, answer: Responder) -> bool {
        self.responder.set((tag, answer)).is_ok()
    }

    /// Install the event hook (once). If a death or abort already happened, it fires now so
    /// the event is not missed by a hook installed just after it.
    pub fn set_hook(&self, hook: Hook) -> bool {
        if self.hook.set(hook).is_err() {
            return false;
        }
        let pending = {
            let st = self.state.lock();
            st.first_dead.is_some() || st.abort.is_some()
        };
        if pending {
            self.fire_hook();
        }
        true
    }

    fn fire_hook(&self) {
        if let Some(h) = self.hook.get() {
            h();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn fifo_per_peer_and_tag() {
        let mb = Mailbox::new(3);
        mb.deliver(1, 5, b"a".to_vec());
        mb.deliver(2, 5, b"other peer".to_vec());
        mb.deliver(1, 6, b"other tag".to_vec());
        mb.deliver(1, 5, b"b".to_vec());
        assert_eq!(mb.wait(1, 5, soon(10)).unwrap(), b"a");
        assert_eq!(mb.wait(1, 5, soon(10)).unwrap(), b"b");
        assert_eq!(mb.wait(1, 6, soon(10)).unwrap(), b"other tag");
        assert_eq!(mb.wait(1, 5, soon(10)), Err(WaitError::Timeout));
        assert_eq!(mb.wait(2, 5, soon(10)).unwrap(), b"other peer");
    }

    #[test]
    fn death_and_abort_wake_waiters_and_fire_hook() {
        let mb = Arc::new(Mailbox::new(3));
        let fired = Arc::new(AtomicUsize::new(0));
        let f = fired.clone();
        assert!(mb.set_hook(Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        })));
        assert!(!mb.set_hook(Box::new(|| {})), "the hook is set once");

        let m = mb.clone();
        let waiter = std::thread::spawn(move || {
            let t = Instant::now();
            (m.wait(1, 0, soon(10_000)), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        mb.deliver(1, 0, b"before death".to_vec());
        mb.peer_dead(1, "rank 1 died".into());
        mb.peer_dead(1, "again".into());
        let (r, _) = waiter.join().unwrap();
        assert_eq!(
            r.unwrap(),
            b"before death",
            "queued data outlives its sender"
        );
        assert_eq!(
            mb.wait(1, 0, soon(10_000)),
            Err(WaitError::PeerDead("rank 1 died".into()))
        );
        assert_eq!(mb.first_dead(), Some((1, "rank 1 died".into())));
        assert_eq!(fired.load(Ordering::SeqCst), 1);

        mb.abort_from(2, "out of memory".into());
        mb.abort_from(0, "second".into());
        assert_eq!(
            mb.wait(0, 0, soon(10_000)),
            Err(WaitError::Aborted(2, "out of memory".into()))
        );
        assert_eq!(mb.abort_notice(), Some((2, "out of memory".into())));
        assert_eq!(fired.load(Ordering::SeqCst), 2);

        mb.peer_left(0);
        assert_eq!(mb.check_peer(0), Err(WaitError::PeerLeft));
        assert_eq!(
            mb.wait(0, 0, soon(10_000)),
            Err(WaitError::Aborted(2, "out of memory".into())),
            "a peer that left after an abort notice is explained by the notice"
        );
        mb.close();
        assert_eq!(mb.wait(2, 0, soon(10_000)), Err(WaitError::Closed));
    }

    #[test]
    fn late_hook_fires_for_earlier_event() {
        let mb = Mailbox::new(2);
        mb.peer_dead(1, "gone".into());
        let fired = Arc::new(AtomicUsize::new(0));
        let f = fired.clone();
        mb.set_hook(Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(fired.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_any_takes_whichever_key_has_a_message() {
        let mb = Arc::new(Mailbox::new(3));
        let keys = [(1, 5), (2, 7)];
        mb.deliver(2, 7, b"second key".to_vec());
        mb.deliver(1, 6, b"not asked for".to_vec());
        assert_eq!(
            mb.wait_any(&keys, soon(10), true),
            Ok((1, b"second key".to_vec()))
        );
        assert_eq!(
            mb.wait_any(&keys, soon(10), true),
            Err((0, WaitError::Timeout))
        );
        // A message that lands while waiting ends the wait.
        let m = mb.clone();
        let t = std::thread::spawn(move || m.wait_any(&keys, soon(10_000), true));
        std::thread::sleep(std::time::Duration::from_millis(20));
        mb.deliver(1, 5, b"first key".to_vec());
        assert_eq!(t.join().unwrap(), Ok((0, b"first key".to_vec())));
        // A death names the key of the dead peer; queued messages still come first.
        mb.deliver(1, 5, b"sent before".to_vec());
        mb.peer_dead(2, "rank 2 gone".into());
        assert_eq!(
            mb.wait_any(&keys, soon(10), true),
            Ok((0, b"sent before".to_vec()))
        );
        assert_eq!(
            mb.wait_any(&keys, soon(10), true),
            Err((1, WaitError::PeerDead("rank 2 gone".into())))
        );
        assert_eq!(mb.wait(1, 6, soon(10)).unwrap(), b"not asked for");
    }
}
