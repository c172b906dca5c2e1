//! Hang attribution (sans-IO): what each rank says it is doing, and the report that
//! compares them ("rank 2 is past op #4 …, ranks 0,1 wait in op #5 …").
//!
//! A timeout alone names one peer and one transfer; the cause is usually a rank that
//! never reached the call (it stopped calling, or made one call fewer). When a wait
//! times out, the core asks every rank for its [`RankStatus`] over the bootstrap and
//! puts [`report`] in the error; the same report is available on demand for a live job.
//!
//! Before the timeout, [`crossed`] finds the one disagreement a call check cannot see
//! when the two calls travel on different paths (a send on the core's connections, a
//! small collective in a plugin's mailboxes): a rank blocked in a send or receive with
//! a peer that is itself blocked in a collective.
//!
//! Wire format: state u8 · waiting u8 · label length u16 · label bytes (UTF-8) ·
//! collectives begun u64 · optionally the call: kind u8 (1 collective, 2 send, 3
//! receive) · u64 (sequence number, or the peer).

use std::fmt::Write;

/// Longest label kept (a group of many operations is summarised before this).
pub const MAX_LABEL: usize = 512;

/// Where a rank is, as far as this communicator knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No operation started yet.
    NoCall,
    /// The last operation started (its label) has not finished.
    InFlight(String),
    /// The last operation started (its label) finished; nothing started since.
    Past(String),
    /// The last operation started (its label) failed (this rank's wait timed out,
    /// or it learnt of another rank's failure).
    Failed(String),
}

/// The single call a rank's last operation is, where it is one (not a group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallRef {
    /// A collective, with its sequence number on the communicator.
    Coll(u64),
    /// A send to this rank.
    Send(u32),
    /// A receive from this rank.
    Recv(u32),
}

impl CallRef {
    /// The call a fingerprint describes.
    pub fn of(fp: &crate::Fingerprint) -> Self {
        let peer = fp.root.unwrap_or(u32::MAX);
        match fp.kind {
            crate::CallKind::Coll(_) => CallRef::Coll(fp.seq),
            crate::CallKind::Send => CallRef::Send(peer),
            crate::CallKind::Recv => CallRef::Recv(peer),
        }
    }

    /// The peer of a send or receive.
    fn peer(self) -> Option<usize> {
        match self {
            CallRef::Send(p) | CallRef::Recv(p) => Some(p as usize),
            CallRef::Coll(_) => None,
        }
    }
}

/// One rank's answer to a status query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankStatus {
    /// Its last operation.
    pub phase: Phase,
    /// Whether a thread of the rank is blocked in a call of this communicator.
    pub waiting: bool,
    /// That operation as one call, when it is one.
    pub call: Option<CallRef>,
    /// Collectives the rank has begun (the next one's sequence number): whether
    /// a peer blocked in a collective is behind it or ahead.
    pub colls_begun: u64,
}

impl RankStatus {
    /// Bytes sent to the rank that asked.
    pub fn encode(&self) -> Vec<u8> {
        let (state, label) = match &self.phase {
            Phase::NoCall => (0u8, ""),
            Phase::InFlight(l) => (1, l.as_str()),
            Phase::Past(l) => (2, l.as_str()),
            Phase::Failed(l) => (3, l.as_str()),
        };
        let mut end = label.len().min(MAX_LABEL);
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        let label = &label.as_bytes()[..end];
        let mut b = Vec::with_capacity(4 + label.len());
        b.push(state);
        b.push(u8::from(self.waiting));
        b.extend_from_slice(&(label.len() as u16).to_le_bytes());
        b.extend_from_slice(label);
        b.extend_from_slice(&self.colls_begun.to_le_bytes());
        if let Some(c) = self.call {
            let (kind, value) = match c {
                CallRef::Coll(seq) => (1u8, seq),
                CallRef::Send(p) => (2, u64::from(p)),
                CallRef::Recv(p) => (3, u64::from(p)),
            };
            b.push(kind);
            b.extend_from_slice(&value.to_le_bytes());
        }
        b
    }

    /// The status in `b`, or `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (&state, rest) = b.split_first()?;
        let (&waiting, rest) = rest.split_first()?;
        let len = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
        let label = String::from_utf8(rest.get(2..2 + len)?.to_vec()).ok()?;
        let colls_begun = u64::from_le_bytes(rest.get(2 + len..10 + len)?.try_into().ok()?);
        let call = match rest.get(10 + len..) {
            Some([kind, v @ ..]) if v.len() == 8 => {
                let v = u64::from_le_bytes(v.try_into().ok()?);
                match kind {
                    1 => Some(CallRef::Coll(v)),
                    2 => Some(CallRef::Send(u32::try_from(v).ok()?)),
                    3 => Some(CallRef::Recv(u32::try_from(v).ok()?)),
                    _ => return None,
                }
            }
            Some([]) => None,
            _ => return None,
        };
        let phase = match state {
            0 => Phase::NoCall,
            1 => Phase::InFlight(label),
            2 => Phase::Past(label),
            3 => Phase::Failed(label),
            _ => return None,
        };
        Some(RankStatus {
            phase,
            waiting: waiting != 0,
            call,
            colls_begun,
        })
    }

    /// The call it waits in, if it is blocked in a single call.
    fn blocked_in(&self) -> Option<(CallRef, &str)> {
        match (&self.phase, self.waiting, self.call) {
            (Phase::InFlight(label), true, Some(c)) => Some((c, label)),
            _ => None,
        }
    }

    /// What the rank does, for one rank (`false`) or several (`true`).
    fn describe(&self, plural: bool) -> String {
        let v = |one: &'static str, many: &'static str| if plural { many } else { one };
        match (&self.phase, self.waiting) {
            (Phase::NoCall, false) => format!("{} made no call yet", v("has", "have")),
            (Phase::NoCall, true) => format!("{} connecting for a first call", v("is", "are")),
            (Phase::InFlight(l), true) => format!("{} in {l}", v("waits", "wait")),
            (Phase::InFlight(l), false) => format!(
                "{} {l} in flight but {} not waiting on it",
                v("has", "have"),
                v("is", "are")
            ),
            (Phase::Past(l), _) => format!("{} past {l} and made no further call", v("is", "are")),
            (Phase::Failed(l), _) => format!("failed in {l}"),
        }
    }

    /// Stragglers first: ranks that are not waiting are usually the cause.
    fn order(&self) -> u8 {
        match (&self.phase, self.waiting) {
            (Phase::Past(_), _) | (Phase::NoCall, false) => 0,
            (Phase::InFlight(_), false) => 1,
            (Phase::Failed(_), _) => 3,
            _ => 2,
        }
    }
}

/// `ranks 0,1` or `rank 2`.
fn ranks(list: &[usize]) -> String {
    let mut s = String::from(if list.len() == 1 { "rank " } else { "ranks " });
    for (i, r) in list.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{r}");
    }
    s
}

/// The report for every rank's status (`None`: it did not answer), ranks in the
/// same state grouped: `rank 2 is past all_reduce(float, sum, 1000) as op #4 and
/// made no further call; ranks 0,1 wait in broadcast(float, 1000, root 0) as op #5`.
pub fn report(statuses: &[Option<RankStatus>]) -> String {
    let mut groups: Vec<(&RankStatus, Vec<usize>)> = Vec::new();
    let mut silent = Vec::new();
    for (rank, s) in statuses.iter().enumerate() {
        match s {
            None => silent.push(rank),
            // Ranks in the same state, whatever their count of collectives.
            Some(s) => match groups
                .iter_mut()
                .find(|(g, _)| (&g.phase, g.waiting, g.call) == (&s.phase, s.waiting, s.call))
            {
                Some((_, list)) => list.push(rank),
                None => groups.push((s, vec![rank])),
            },
        }
    }
    groups.sort_by_key(|(s, list)| (s.order(), list[0]));
    let mut parts: Vec<String> = groups
        .iter()
        .map(|(s, list)| format!("{} {}", ranks(list), s.describe(list.len() > 1)))
        .collect();
    if !silent.is_empty() {
        parts.push(format!(
            "{} did not answer (dead, stopped, or no longer in the communicator)",
            ranks(&silent)
        ));
    }
    parts.join("; ")
}

/// Two ranks blocked on each other in different calls: rank `a` in a send or
/// receive with `b`, `b` in a collective `a` has not begun (which needs `a`, who
/// cannot join it before its send or receive completes, which needs `b`; a
/// collective `a` already made is only `b` running behind, as ranks do where a
/// root returns once posted); or both in the same collective
/// (one sequence number) that they describe differently — the same call on two
/// paths (one rank's run by the core, the other's by a plugin), which never meet.
/// Returns `(a, a's call, b, b's call)` for the first such pair. The caller asks only
/// after a wait has lasted, and acts only when two answers some time apart agree: a
/// pair seen once may be a moment's coincidence.
pub fn crossed(statuses: &[Option<RankStatus>]) -> Option<(usize, String, usize, String)> {
    let blocked = |r: usize| statuses.get(r)?.as_ref()?.blocked_in();
    (0..statuses.len()).find_map(|a| {
        let (call, label) = blocked(a)?;
        let pair = |b: usize, their_label: &str| (a, label.to_string(), b, their_label.to_string());
        match call {
            CallRef::Send(_) | CallRef::Recv(_) => {
                let b = call.peer()?;
                let (theirs, their_label) = blocked(b)?;
                let begun = statuses[a].as_ref()?.colls_begun;
                matches!(theirs, CallRef::Coll(seq) if seq >= begun).then(|| pair(b, their_label))
            }
            CallRef::Coll(seq) => (a + 1..statuses.len()).find_map(|b| {
                let (theirs, their_label) = blocked(b)?;
                (theirs == CallRef::Coll(seq) && their_label != label).then(|| pair(b, their_label))
            }),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(phase: Phase, waiting: bool) -> Option<RankStatus> {
        Some(RankStatus {
            phase,
            waiting,
            call: None,
            colls_begun: 0,
        })
    }

    fn blocked(label: &str, call: CallRef) -> Option<RankStatus> {
        Some(RankStatus {
            phase: Phase::InFlight(label.into()),
            waiting: true,
            call: Some(call),
            colls_begun: 0,
        })
    }

    #[test]
    fn a_send_blocked_on_a_rank_blocked_in_a_collective_is_crossed() {
        let send = "send of 4000 bytes to rank 1 (its send #0 to that rank)";
        let ar = "all_reduce(float, sum, 1000) as op #1 on plugin 'shm-coll'";
        let all = [
            blocked(send, CallRef::Send(1)),
            blocked(ar, CallRef::Coll(1)),
            blocked(ar, CallRef::Coll(1)),
        ];
        assert_eq!(crossed(&all), Some((0, send.into(), 1, ar.into())));
        // The same from the receiving side.
        let recv = "receive of 4000 bytes from rank 0 (its receive #0 from that rank)";
        let all = [
            blocked(ar, CallRef::Coll(1)),
            blocked(recv, CallRef::Recv(0)),
            blocked(ar, CallRef::Coll(1)),
        ];
        assert_eq!(crossed(&all), Some((1, recv.into(), 0, ar.into())));
        // A rank that made that collective already and waits in a later send:
        // the peer is only behind (it runs behind where a root returns once
        // posted), nothing is crossed; one collective later it would be.
        let mut ahead = blocked(send, CallRef::Send(1)).unwrap();
        ahead.colls_begun = 2;
        let all = [Some(ahead.clone()), blocked(ar, CallRef::Coll(1))];
        assert_eq!(crossed(&all), None);
        ahead.colls_begun = 1;
        let all = [Some(ahead), blocked(ar, CallRef::Coll(1))];
        assert_eq!(crossed(&all), Some((0, send.into(), 1, ar.into())));
    }

    #[test]
    fn one_collective_on_two_paths_is_crossed() {
        let core = "all_reduce(float, sum, 2) as op #3";
        let plugin = "all_reduce(float, sum, 2) as op #3 on plugin 'shm-coll'";
        let all = [
            blocked(plugin, CallRef::Coll(3)),
            blocked(core, CallRef::Coll(3)),
            blocked(plugin, CallRef::Coll(3)),
        ];
        assert_eq!(crossed(&all), Some((0, plugin.into(), 1, core.into())));
        // One path, or a rank still in an earlier collective: nothing crossed.
        assert_eq!(
            crossed(&[
                blocked(plugin, CallRef::Coll(3)),
                blocked(plugin, CallRef::Coll(3))
            ]),
            None
        );
        assert_eq!(
            crossed(&[
                blocked(plugin, CallRef::Coll(3)),
                blocked("all_reduce(float, sum, 2) as op #2", CallRef::Coll(2))
            ]),
            None
        );
    }

    #[test]
    fn waits_that_can_still_end_are_not_crossed() {
        let ar = "all_reduce(float, sum, 1000) as op #1";
        // Both in the collective; a send whose peer is not blocked, or is in a send
        // or receive itself; a peer that did not answer; a send not waited on.
        assert_eq!(
            crossed(&[blocked(ar, CallRef::Coll(1)), blocked(ar, CallRef::Coll(1))]),
            None
        );
        assert_eq!(
            crossed(&[
                blocked("send", CallRef::Send(1)),
                st(Phase::Past(ar.into()), false)
            ]),
            None
        );
        assert_eq!(
            crossed(&[
                blocked("send", CallRef::Send(1)),
                blocked("recv", CallRef::Recv(0))
            ]),
            None
        );
        assert_eq!(crossed(&[blocked("send", CallRef::Send(1)), None]), None);
        assert_eq!(crossed(&[blocked("send", CallRef::Send(7))]), None);
        let mut idle = blocked("send", CallRef::Send(1)).unwrap();
        idle.waiting = false;
        assert_eq!(crossed(&[Some(idle), blocked(ar, CallRef::Coll(1))]), None);
    }

    #[test]
    fn round_trip_and_garbage() {
        for s in [
            RankStatus {
                phase: Phase::NoCall,
                waiting: false,
                call: None,
                colls_begun: 0,
            },
            RankStatus {
                phase: Phase::InFlight("broadcast(float, 4, root 0) as op #5".into()),
                waiting: true,
                call: Some(CallRef::Coll(5)),
                colls_begun: 6,
            },
            RankStatus {
                phase: Phase::Past("send of 8 bytes to rank 1".into()),
                waiting: false,
                call: Some(CallRef::Send(1)),
                colls_begun: 0,
            },
            RankStatus {
                phase: Phase::Failed("barrier() as op #2".into()),
                waiting: true,
                call: Some(CallRef::Recv(3)),
                colls_begun: 0,
            },
        ] {
            assert_eq!(RankStatus::decode(&s.encode()), Some(s));
        }
        assert_eq!(RankStatus::decode(&[]), None);
        assert_eq!(RankStatus::decode(&[9, 0, 0, 0]), None);
        assert_eq!(RankStatus::decode(&[1, 0, 5, 0, b'a']), None, "short label");
        assert_eq!(RankStatus::decode(&[1, 0, 0, 0, 9, 0]), None, "short count");
        assert_eq!(
            RankStatus::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0]),
            None,
            "short call"
        );
    }

    #[test]
    fn long_labels_are_cut_on_a_character_boundary() {
        let s = RankStatus {
            phase: Phase::InFlight("é".repeat(MAX_LABEL)),
            waiting: false,
            call: None,
            colls_begun: 0,
        };
        let Some(RankStatus {
            phase: Phase::InFlight(l),
            ..
        }) = RankStatus::decode(&s.encode())
        else {
            panic!("decodes");
        };
        assert_eq!(l.len(), MAX_LABEL);
    }

    #[test]
    fn the_straggler_comes_first_and_equal_ranks_are_grouped() {
        let bcast = Phase::InFlight("broadcast(float, 1000, root 0) as op #5".into());
        let r = report(&[
            st(bcast.clone(), true),
            st(bcast, true),
            st(
                Phase::Past("all_reduce(float, sum, 1000) as op #4".into()),
                false,
            ),
        ]);
        assert_eq!(
            r,
            "rank 2 is past all_reduce(float, sum, 1000) as op #4 and made no further call; \
             ranks 0,1 wait in broadcast(float, 1000, root 0) as op #5"
        );
    }

    #[test]
    fn silent_and_idle_ranks_are_named() {
        let r = report(&[
            st(Phase::InFlight("x".into()), true),
            None,
            st(Phase::NoCall, false),
            st(Phase::InFlight("y".into()), false),
            None,
            st(Phase::Failed("x".into()), false),
        ]);
        assert_eq!(
            r,
            "rank 2 has made no call yet; rank 3 has y in flight but is not waiting on it; \
             rank 0 waits in x; rank 5 failed in x; ranks 1,4 did not answer (dead, stopped, or no longer in the communicator)"
        );
    }
}
