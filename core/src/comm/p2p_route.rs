//! Sends and receives offered to the collective plugins (`p2p_can_run`,
//! `p2p_launch`): stream-ordered device ops, and host-memory ops (`shm-coll`
//! takes the small ones on one host). Each op is asked about alone, so the
//! two ends of a message, asked on two ranks, always agree on who runs it —
//! whether either end is blocking or not. A group's ops won by a plugin go
//! to one `p2p_launch` per plugin, in posted order (a group's sends and
//! receives must progress together: split over launches, two ranks could
//! each wait in a send for the other's later receive). Plugins launch in
//! their list order, the same on every rank. Device: before the rest of the
//! group takes the core's path. Host: the rest is queued on the core's
//! engine first (the progress thread drives it), then the plugins run theirs
//! to completion on the calling thread.

use super::Communicator;
use crate::collective::bids::{BidKey, HostP2p};
use crate::collective::Runner;
use crate::device::{order, RawStream};
use crate::engine::Request;
use crate::error::{Error, Result};
use crate::plan::{Task, Tasks};
use crate::plugin::Dir;
use ferrocx_algo::Fingerprint;
use ferrocx_sdk::abi::*;
use ferrocx_sdk::cuda::Event;
use ferrocx_sdk::spans::{self, Point};
use smallvec::SmallVec;
use std::ffi::c_void;

/// One plugin launch: the runner's index and its op indices, posted order.
pub(crate) type Launch = (usize, Indices);

/// One launch's ops as the ABI passes them (inline for a call's usual handful).
type P2pOps = SmallVec<[FxP2pOp; 4]>;

/// The most ops of a group [`Communicator::host_p2p_usual`] takes (a send
/// and a receive, say).
const USUAL: usize = 4;

/// Op indices (inline for a call's usual handful: no allocation per call).
pub(crate) type Indices = SmallVec<[usize; 4]>;

/// Which launches a group of `n` tasks makes: per winning plugin, its op
/// indices in posted order, the launches in plugin order; and the tasks
/// nobody won (collectives, host ops, declined ops), in order, for the
/// core. `choose(i)` is task `i`'s winner, `None` for the core.
pub(crate) fn split(
    n: usize,
    mut choose: impl FnMut(usize) -> Option<usize>,
) -> (SmallVec<[Launch; 1]>, Indices) {
    let mut launches: SmallVec<[Launch; 1]> = SmallVec::new();
    let mut rest = Indices::new();
    for i in 0..n {
        match choose(i) {
            Some(p) => match launches.iter_mut().find(|(q, _)| *q == p) {
                Some((_, ops)) => ops.push(i),
                None => launches.push((p, smallvec::smallvec![i])),
            },
            None => rest.push(i),
        }
    }
    launches.sort_by_key(|(p, _)| *p);
    (launches, rest)
}

/// The stream a launch goes on (its first op's) and the other distinct
/// streams of its ops, first seen first: the launch stream waits for them
/// before the launch, and they for it after. `None` for no streams.
pub(crate) fn join_plan<S: Copy + PartialEq>(
    streams: impl IntoIterator<Item = S>,
) -> Option<(S, Vec<S>)> {
    let mut it = streams.into_iter();
    let first = it.next()?;
    let mut others: Vec<S> = Vec::new();
    for s in it {
        if s != first && !others.contains(&s) {
            others.push(s);
        }
    }
    Some((first, others))
}

pub(super) fn raw_op(dir: Dir, peer: usize, bytes: usize, buf: usize) -> FxP2pOp {
    FxP2pOp {
        kind: if dir == Dir::Send {
            FX_P2P_SEND
        } else {
            FX_P2P_RECV
        },
        peer: peer as i32,
        bytes: bytes as u64,
        buf: buf as *mut c_void,
    }
}

fn capture_flag(capturing: bool) -> u32 {
    if capturing {
        FX_COLL_CAPTURING
    } else {
        0
    }
}

/// The stream of an op ordered on it, as the ABI passes streams.
fn abi_stream(s: RawStream) -> *mut c_void {
    s as *mut c_void
}

impl Communicator {
    /// The plugin that wins `op` alone on `mem` memory, `None` for the
    /// core. The caller holds `coll_serial`.
    fn p2p_winner(&self, op: &FxP2pOp, mem: i32, capturing: bool) -> Option<usize> {
        let d = FxP2pDesc {
            ops: op,
            nops: 1,
            mem_kind: mem,
            flags: capture_flag(capturing),
            reserved: 0,
        };
        // An op with this rank itself goes only to a plugin that copies such
        // pairs itself (device memory).
        let with_self = op.peer as usize == self.rank();
        let asks = |p: &crate::collective::CollectivePlugin| {
            !with_self || (mem == FX_MEM_CUDA && p.takes_self_ops())
        };
        match Runner::best(self.colls.plugins().iter().map(|p| {
            if asks(p) {
                p.p2p_can_run(&d)
            } else {
                0
            }
        })) {
            Runner::Plugin(i) => Some(i),
            Runner::Core => None,
        }
    }

    /// A broken or aborted communicator, a dead peer: host ops a plugin would
    /// run are refused as on the core's path (the plugin might still find its
    /// peers' messages). Only for those: the core's path reads what its peers
    /// sent first (a refused connection's reason before the abort that follows).
    fn refuse_if_stopped(&self) -> Result<()> {
        if self.shared.stop.load(std::sync::atomic::Ordering::Acquire) != 0 {
            self.shared
                .check_peers()
                .map_err(|e| self.engine.break_with(e))?;
            self.engine.usable()?;
        }
        Ok(())
    }

    /// Whether some collective plugin has the point-to-point hooks.
    fn any_p2p_plugin(&self) -> bool {
        self.colls.plugins().iter().any(|p| p.has_p2p())
    }

    /// Who would run a device send (`send`) or receive of `bytes` with
    /// `peer` (on a stream not being captured): a collective plugin's name,
    /// or `"core"`.
    pub fn device_p2p_runner(&self, send: bool, bytes: usize, peer: usize) -> Result<String> {
        self.p2p_runner(FX_MEM_CUDA, send, bytes, peer)
    }

    /// Who would run a host-memory send (`send`) or receive of `bytes` with
    /// `peer`: a collective plugin's name, or `"core"`.
    pub fn host_p2p_runner(&self, send: bool, bytes: usize, peer: usize) -> Result<String> {
        self.p2p_runner(FX_MEM_HOST, send, bytes, peer)
    }

    fn p2p_runner(&self, mem: i32, send: bool, bytes: usize, peer: usize) -> Result<String> {
        self.check_peer(peer, if send { "send" } else { "recv" })?;
        if !self.any_p2p_plugin() {
            return Ok("core".to_string());
        }
        let dir = if send { Dir::Send } else { Dir::Recv };
        // A non-null address: the plugin is asked about the op's shape only.
        let op = raw_op(dir, peer, bytes, 1);
        let _serial = self.coll_serial.lock();
        Ok(match self.p2p_winner(&op, mem, false) {
            Some(i) => self.colls.plugins()[i].name().to_string(),
            None => "core".to_string(),
        })
    }

    /// The plugin that wins host op `op` alone (remembered per shape), `None`
    /// for the core. The caller holds `coll_serial` (`serial`).
    #[inline]
    fn host_winner(&self, serial: &mut HostP2p, op: &FxP2pOp) -> Option<usize> {
        let key = BidKey {
            send: op.kind == FX_P2P_SEND,
            peer: op.peer as usize,
            bytes: op.bytes as usize,
        };
        serial
            .bids
            .winner(key, || self.p2p_winner(op, FX_MEM_HOST, false))
    }

    /// A host group of the usual shape, run at once: at most [`USUAL`]
    /// sends and receives (`ops`, posted order, with other ranks: a plugin
    /// never wins a host op with this rank itself) that one plugin wins
    /// whole. `None` when the group is not that (the caller takes the
    /// general route: nothing was launched or numbered); else the launch's
    /// result. Blocking sends, receives and `sendrecv` come here without a
    /// [`Group`](super::Group): a call of a few hundred nanoseconds (issue 18).
    pub(super) fn host_p2p_usual(&self, ops: &[FxP2pOp]) -> Option<Result<()>> {
        if ops.is_empty() || ops.len() > USUAL || !self.any_p2p_plugin() {
            return None;
        }
        let mut serial = self.coll_serial.lock();
        let mut one = None;
        for op in ops {
            let w = self.host_winner(&mut serial, op)?;
            if one.is_some_and(|o| o != w) {
                return None;
            }
            one = Some(w);
        }
        let p = one?;
        Some(self.refuse_if_stopped().and_then(|()| {
            // Numbered as the plugin counts them; the first names the launch.
            let mut first = None;
            for op in ops {
                let (peer, send) = (op.peer as usize, op.kind == FX_P2P_SEND);
                let seq = serial.next_seq(peer, send);
                first.get_or_insert_with(|| {
                    let bytes = op.bytes as usize;
                    if send {
                        Fingerprint::send(seq, peer, bytes)
                    } else {
                        Fingerprint::recv(seq, peer, bytes)
                    }
                });
            }
            self.p2p_host_on(p, ops, &first.expect("ops is not empty"))
        }))
    }

    /// Run the host sends and receives of `tasks` (not numbered yet) that a
    /// collective plugin wins: the rest first numbered and queued on the
    /// engine (not driven by this thread), then the plugins' ops to
    /// completion here. `None` when no plugin wins any (the caller plans
    /// them all); otherwise the request of the rest, or a finished one.
    /// `tasks` is borrowed, not moved: a group's inline ops are a few hundred
    /// bytes, copied at every move on a path of a few hundred nanoseconds.
    pub(super) fn host_p2p_on_plugins(
        &self,
        tasks: &mut Tasks,
        driving: bool,
    ) -> Result<Option<Request>> {
        if !self.any_p2p_plugin() {
            return Ok(None);
        }
        let host_op = |t: &Task| match t {
            Task::P2p(p) if !p.device => Some(raw_op(p.dir, p.peer, p.len, p.ptr)),
            _ => None,
        };
        if !tasks.iter().any(|t| matches!(t, Task::P2p(p) if !p.device)) {
            return Ok(None); // collectives, device ops: no lock
        }
        // The usual group (a send and a receive, say) runs on its plugin at once.
        // (A fixed array: a `SmallVec`'s pushes cost more than the copies.)
        if tasks.len() <= USUAL {
            let mut ops = [raw_op(Dir::Send, 0, 0, 0); USUAL];
            let mut n = 0;
            for t in tasks.iter() {
                let Some(op) = host_op(t) else { break };
                ops[n] = op;
                n += 1;
            }
            if n == tasks.len() {
                if let Some(r) = self.host_p2p_usual(&ops[..n]) {
                    return r.map(|()| Some(Request::finished()));
                }
            }
        }
        // One lock for the bids, the numbers and (with nothing for the core)
        // the launches: the plugins' hooks are serialized anyway.
        let mut serial = self.coll_serial.lock();
        let winner = |serial: &mut HostP2p, op: &FxP2pOp| self.host_winner(serial, op);
        // Otherwise per op (the bids are remembered: asking again is cheap).
        let ops: SmallVec<[Option<FxP2pOp>; 4]> = tasks.iter().map(host_op).collect();
        let winners: SmallVec<[Option<usize>; 4]> = ops
            .iter()
            .map(|op| op.as_ref().and_then(|op| winner(&mut serial, op)))
            .collect();
        let (launches, rest) = split(tasks.len(), |i| winners[i]);
        if launches.is_empty() {
            return Ok(None);
        }
        self.refuse_if_stopped()?;
        for (_, idx) in &launches {
            number_plugin_ops(&mut serial, tasks, idx.iter().copied());
        }
        let groups: SmallVec<[(usize, P2pOps, Fingerprint); 1]> = launches
            .iter()
            .map(|(p, idx)| {
                let group = idx.iter().filter_map(|&i| ops[i]).collect();
                (*p, group, tasks[idx[0]].fingerprint())
            })
            .collect();
        // The caller holds `coll_serial`.
        let launch_all = || -> Result<()> {
            for (p, group, first) in &groups {
                self.p2p_host_on(*p, group, first)?;
            }
            Ok(())
        };
        if rest.is_empty() {
            launch_all()?;
            return Ok(Some(Request::finished()));
        }
        drop(serial);
        let run_plugins = || {
            let _serial = self.coll_serial.lock();
            launch_all()
        };
        let mut keep = vec![false; tasks.len()];
        for &i in &rest {
            keep[i] = true;
        }
        let mut rest: Vec<Task> = std::mem::take(tasks)
            .into_iter()
            .zip(keep)
            .filter_map(|(t, k)| k.then_some(t))
            .collect();
        self.number_p2p(&mut rest);
        let (plans, label) = self.plan_core(rest)?;
        let (result, core) = if self.engine.connected(&plans) {
            let core = self.start_plans(plans, label, false)?;
            (run_plugins(), Some(core))
        } else {
            // Making connections waits for the peers, which may first wait
            // for this group's plugin ops: both at once.
            std::thread::scope(|s| {
                let core = s.spawn(|| self.start_plans(plans, label, false));
                let r = run_plugins();
                let core = core.join().unwrap_or_else(|_| {
                    Err(Error::Io(
                        "connecting for a group's core part panicked".into(),
                    ))
                });
                match core {
                    Ok(req) => (r, Some(req)),
                    Err(e) => (r.and(Err(e)), None),
                }
            })
        };
        match (result, core) {
            (Ok(()), None) => Ok(Some(Request::finished())),
            (Ok(()), Some(req)) if !driving => Ok(Some(req)),
            (Ok(()), Some(req)) => req.wait().map(|()| Some(Request::finished())),
            // The rest still runs (dropping its request waits for it).
            (Err(e), _) => Err(e),
        }
    }

    /// One plugin's `group` of ops (posted order) on host memory, run to
    /// completion; `first`: its first op's fingerprint (status reports name
    /// the launch by it). The caller holds `coll_serial`.
    fn p2p_host_on(&self, p: usize, group: &[FxP2pOp], first: &Fingerprint) -> Result<()> {
        let desc = FxP2pDesc {
            ops: group.as_ptr(),
            nops: group.len() as u32,
            mem_kind: FX_MEM_HOST,
            flags: 0,
            reserved: 0,
        };
        // Under the lock: a communicator destroyed meanwhile (another thread)
        // no longer has its plugins' comms.
        self.check_live()?;
        let plugin = self.colls.get(p)?;
        let status = &self.shared.status;
        // This thread blocks in the plugin: recorded lock-free, as waiting.
        status.plugin_begin(&first.encode(), p);
        // SAFETY: host buffers the group borrows (or raw ones under the caller's
        // contract), valid until this returns; the descriptor lives across the call.
        let r = unsafe { plugin.p2p_launch(&desc, std::ptr::null_mut()) };
        status.plugin_end(r.is_ok());
        let Err(e) = r else {
            return Ok(());
        };
        // A receive of another size fails alone, as on the core's path; the
        // rest leaves the ranks out of step: the communicator breaks.
        if let Some(text) = size_error(&e) {
            return Err(Error::InvalidArgument(text));
        }
        Err(self
            .engine
            .break_with(self.p2p_launch_error(e, group.len())))
    }

    /// Launch the device sends and receives of `tasks` that a collective
    /// plugin wins; return the rest (with their streams) for the core.
    /// `pairs`: the (send, receive) indices of the sends to this rank itself
    /// ([`crate::plan::self_pairs`]); a pair goes to a plugin only whole.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`] for every task and stream.
    pub(super) unsafe fn device_p2p_on_plugins(
        &self,
        tasks: Vec<Task>,
        streams: Vec<RawStream>,
        pairs: &[(usize, usize)],
    ) -> Result<(Vec<Task>, Vec<RawStream>)> {
        let device_p2p = |t: &Task| matches!(t, Task::P2p(p) if p.device);
        if !tasks.iter().any(device_p2p) {
            return Ok((tasks, streams));
        }
        if !self.any_p2p_plugin() {
            // Every message is left to the core: asked once per stream.
            self.gpu()?.bind()?;
            let mut seen: SmallVec<[(RawStream, bool); 2]> = SmallVec::new();
            self.refuse_captured_leftovers(&tasks, |i| {
                let s = streams[i];
                if let Some(&(_, c)) = seen.iter().find(|(q, _)| *q == s) {
                    return Ok(c);
                }
                let c = order::is_capturing(s)?;
                seen.push((s, c));
                Ok(c)
            })?;
            return Ok((tasks, streams));
        }
        let _span = spans::enter(Point::CoreP2pGroup);
        self.check_live()?;
        self.device_error()?;
        // Per task: its raw op and whether its stream is being captured
        // (asked once per stream).
        let mut seen: Vec<(RawStream, bool)> = Vec::new();
        let mut ops: Vec<Option<(FxP2pOp, bool)>> = Vec::with_capacity(tasks.len());
        for (t, &s) in tasks.iter().zip(&streams) {
            let Task::P2p(p) = t else {
                ops.push(None);
                continue;
            };
            if !p.device {
                ops.push(None);
                continue;
            }
            let capturing = match seen.iter().find(|(q, _)| *q == s) {
                Some(&(_, c)) => c,
                None => {
                    let c = order::is_capturing(s)?;
                    seen.push((s, c));
                    c
                }
            };
            ops.push(Some((raw_op(p.dir, p.peer, p.len, p.ptr), capturing)));
        }
        {
            // The plugins' comm hooks are serialized (the ABI's promise), and
            // the bids and launches of one group stay together.
            let _serial = self.coll_serial.lock();
            let mut winners: SmallVec<[Option<usize>; 4]> = ops
                .iter()
                .map(|o| o.and_then(|(op, capturing)| self.p2p_winner(&op, FX_MEM_CUDA, capturing)))
                .collect();
            for &(s, r) in pairs {
                if winners[s] != winners[r] {
                    (winners[s], winners[r]) = (None, None);
                }
            }
            self.refuse_captured_leftovers(&tasks, |i| {
                Ok(winners[i].is_none() && ops[i].is_some_and(|(_, c)| c))
            })?;
            let (launches, rest) = split(tasks.len(), |i| winners[i]);
            if launches.is_empty() {
                return Ok((tasks, streams));
            }
            let several = launches.len() > 1;
            for (p, idx) in &launches {
                // SAFETY: the caller's contract for every op's buffer and stream.
                unsafe { self.p2p_launch_on(*p, idx, &ops, &streams, several)? };
            }
            let mut keep = vec![false; tasks.len()];
            for &i in &rest {
                keep[i] = true;
            }
            let (mut t2, mut s2) = (
                Vec::with_capacity(rest.len()),
                Vec::with_capacity(rest.len()),
            );
            for ((t, s), k) in tasks.into_iter().zip(streams).zip(keep) {
                if k {
                    t2.push(t);
                    s2.push(s);
                }
            }
            Ok((t2, s2))
        }
    }

    /// A device message to or from a peer on a stream being captured that no
    /// plugin takes (`left_captured`: task `i` is left to the core and its
    /// stream is being captured) would reach the core, whose device path
    /// cannot be captured: refused before any of its group is queued. (Sends
    /// to the rank itself are copies on the stream, which a capture records.)
    fn refuse_captured_leftovers(
        &self,
        tasks: &[Task],
        mut left_captured: impl FnMut(usize) -> Result<bool>,
    ) -> Result<()> {
        let me = self.rank();
        for (i, t) in tasks.iter().enumerate() {
            let Task::P2p(p) = t else { continue };
            if p.device && p.peer != me && left_captured(i)? {
                return Err(super::device::capture_refusal(crate::plan::label(tasks)));
            }
        }
        Ok(())
    }

    /// One plugin's launch of ops `idx` (posted order): on the first op's
    /// stream, which waits for the ops' other streams first and which they
    /// wait for after. `several`: other plugins launch parts of the same
    /// group (their joins may have changed a stream's capture). The caller
    /// holds `coll_serial`.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`] for every op's buffer and stream.
    unsafe fn p2p_launch_on(
        &self,
        p: usize,
        idx: &[usize],
        ops: &[Option<(FxP2pOp, bool)>],
        streams: &[RawStream],
        several: bool,
    ) -> Result<()> {
        let plugin = self.colls.get(p)?;
        let group: Vec<FxP2pOp> = idx
            .iter()
            .filter_map(|&i| ops[i].map(|(op, _)| op))
            .collect();
        // The launch stream joins any capture of the others, so the launch is
        // captured if any op's stream is.
        let mut capturing = idx.iter().any(|&i| ops[i].is_some_and(|(_, c)| c));
        let Some((launch, others)) = join_plan(idx.iter().map(|&i| streams[i])) else {
            return Ok(());
        };
        if !others.is_empty() {
            self.gpu()?.bind()?;
            for &s in &others {
                let e = Event::new().map_err(Error::cuda)?;
                // SAFETY: a live stream of this device (the caller's contract),
                // whose context is bound and the event made in.
                unsafe { e.record(s) }.map_err(Error::cuda)?;
                // SAFETY: as above, for the launch stream.
                unsafe { order::wait_event(launch, &e)? };
            }
        }
        if !capturing && (several || !others.is_empty()) {
            // Joins (this launch's, or another plugin's of the same group) may
            // have drawn the launch stream into a capture since the flags were
            // read: the plugin's flag must say what the stream is now.
            capturing = order::is_capturing(launch)?;
        }
        let desc = FxP2pDesc {
            ops: group.as_ptr(),
            nops: group.len() as u32,
            mem_kind: FX_MEM_CUDA,
            flags: capture_flag(capturing),
            reserved: 0,
        };
        let span = spans::enter(Point::CorePluginLaunch);
        // SAFETY: the caller's contract for the buffers and the stream; the
        // descriptor and its ops live across the call.
        let r = unsafe { plugin.p2p_launch(&desc, abi_stream(launch)) };
        drop(span);
        if let Err(e) = r {
            return Err(self.p2p_launch_error(e, group.len()));
        }
        if !plugin.launch_bounded() {
            self.note_host_bound(|| {
                format!(
                    "{}'s launch of {} sends and receives may need a host thread",
                    plugin.shared_name(),
                    group.len()
                )
            });
        }
        if !others.is_empty() {
            let e = Event::new().map_err(Error::cuda)?;
            // SAFETY: as above.
            unsafe { e.record(launch) }.map_err(Error::cuda)?;
            for &s in &others {
                // SAFETY: as above.
                unsafe { order::wait_event(s, &e)? };
            }
        }
        Ok(())
    }

    /// A failed `p2p_launch` as reported: as a collective plugin's launch
    /// (`dispatch::run_on_plugin`), with the op count in the plugin's text.
    fn p2p_launch_error(&self, e: Error, nops: usize) -> Error {
        // A plugin that failed because another rank gave up reports its own
        // symptom; the other rank's reason is the cause to report.
        self.shared.failure_cause(&e).unwrap_or_else(|| {
            with_op_count(super::dispatch::plugin_error(e, self.shared.timeout), nops)
        })
    }
}

/// Number the host sends and receives a plugin runs among the plugins' sends
/// to (receives from) their peers, as the plugin counts them: status reports
/// name a launch by its first op's number.
fn number_plugin_ops(serial: &mut HostP2p, tasks: &mut [Task], idx: impl Iterator<Item = usize>) {
    for i in idx {
        if let Task::P2p(p) = &mut tasks[i] {
            p.seq = serial.next_seq(p.peer, p.dir == Dir::Send);
        }
    }
}

/// A plugin's "mismatched sizes" error (a receive met a send of another
/// size), without the hook's prefix.
fn size_error(e: &Error) -> Option<String> {
    let Error::Plugin { code, message, .. } = e else {
        return None;
    };
    let text = message.strip_prefix("p2p_launch: ").unwrap_or(message);
    (*code == FX_INVALID_ARGUMENT && text.starts_with("mismatched sizes: "))
        .then(|| text.to_string())
}

/// A plugin error's text with the launch's op count.
fn with_op_count(e: Error, nops: usize) -> Error {
    match e {
        Error::Plugin {
            plugin,
            hook,
            peer,
            code,
            message,
        } => Error::Plugin {
            plugin,
            hook,
            peer,
            code,
            message: format!(
                "{message} (a launch of {nops} point-to-point op{})",
                if nops == 1 { "" } else { "s" }
            ),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(l: &[Launch]) -> Vec<(usize, Vec<usize>)> {
        l.iter().map(|(p, ops)| (*p, ops.to_vec())).collect()
    }

    /// Per op: every plugin's priority (`None`: a collective or host op,
    /// never offered); the winner as `p2p_winner` picks it.
    fn chooser(bids: &[Option<Vec<i32>>]) -> impl FnMut(usize) -> Option<usize> + '_ {
        |i| {
            bids[i]
                .as_ref()
                .and_then(|b| match Runner::best(b.iter().copied()) {
                    Runner::Plugin(p) => Some(p),
                    Runner::Core => None,
                })
        }
    }

    #[test]
    fn ops_go_to_their_winner_in_posted_order_one_launch_per_plugin() {
        let win = [Some(1), None, Some(0), Some(1), None, Some(0), Some(1)];
        let (l, rest) = split(7, |i| win[i]);
        // Plugin order, not first-op order: every rank queues plugins alike.
        assert_eq!(plain(&l), vec![(0, vec![2, 5]), (1, vec![0, 3, 6])]);
        assert_eq!(rest.to_vec(), vec![1, 4]);
    }

    #[test]
    fn none_accepted_or_nothing_to_split() {
        let (l, rest) = split(3, |_| None);
        assert!(l.is_empty());
        assert_eq!(rest.to_vec(), vec![0, 1, 2]);
        let (l, rest) = split(0, |_| Some(0));
        assert!(l.is_empty() && rest.is_empty());
    }

    #[test]
    fn ties_go_to_the_core_then_the_earlier_plugin() {
        let core = FX_COLL_CORE_PRIORITY;
        let bids = [
            Some(vec![core, core]),         // tie with the core: core
            Some(vec![core + 5, core + 5]), // tie between plugins: the first
            Some(vec![0, core + 1]),        // only the second bids
            Some(vec![0, 0]),               // nobody
        ];
        let (l, rest) = split(bids.len(), chooser(&bids));
        assert_eq!(plain(&l), vec![(0, vec![1]), (1, vec![2])]);
        assert_eq!(rest.to_vec(), vec![0, 3]);
    }

    #[test]
    fn collectives_in_a_group_stay_with_the_core_in_order() {
        let hi = FX_COLL_CORE_PRIORITY + 1;
        // coll, send (won), coll, recv (declined), recv (won)
        let bids = [None, Some(vec![hi]), None, Some(vec![0]), Some(vec![hi])];
        let (l, rest) = split(bids.len(), chooser(&bids));
        assert_eq!(plain(&l), vec![(0, vec![1, 4])]);
        assert_eq!(rest.to_vec(), vec![0, 2, 3]);
    }

    #[test]
    fn a_launch_goes_on_its_first_op_s_stream_and_joins_the_others() {
        assert_eq!(join_plan::<u8>([]), None);
        assert_eq!(join_plan([7]), Some((7, vec![])));
        assert_eq!(join_plan([7, 7, 7]), Some((7, vec![])));
        assert_eq!(join_plan([7, 3, 7, 9, 3]), Some((7, vec![3, 9])));
    }

    #[test]
    fn launch_errors_carry_the_op_count() {
        let e = |message: &str| Error::Plugin {
            plugin: "ce".into(),
            hook: "p2p_launch",
            peer: None,
            code: FX_INTERNAL,
            message: message.into(),
        };
        let one = with_op_count(e("p2p_launch: boom"), 1).to_string();
        assert!(
            one.contains("'ce'") && one.contains("boom (a launch of 1 point-to-point op)"),
            "{one}"
        );
        let three = with_op_count(e("x"), 3).to_string();
        assert!(three.contains("3 point-to-point ops"), "{three}");
        assert!(matches!(
            with_op_count(Error::invalid("y"), 2),
            Error::InvalidArgument(m) if m == "y"
        ));
    }
}
