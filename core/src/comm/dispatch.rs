//! Per call: who runs a collective — a collective plugin (`can_run` above the
//! core's priority) or the core's own algorithms — and running it on the
//! plugin. The descriptor says which buffers lie in symmetric windows.

use super::Communicator;
use crate::collective::bids::{HostP2p, Repeat, RepeatKey};
use crate::collective::{abi_coll, Choice, Runner};
use crate::error::{Error, Result};
use crate::plan::{CollSpec, CollTask, Label};
use crate::window::Entry;
use ferrocx_sdk::abi::*;
use ferrocx_sdk::spans::{self, Point};
use parking_lot::MutexGuard;
use std::ffi::c_void;
use std::sync::Arc;

/// A call as the dispatcher sees it (buffers already validated).
pub(crate) struct Call<'a> {
    pub spec: &'a CollSpec,
    pub send: u64,
    pub recv: u64,
    pub in_place: bool,
    pub mem: i32,
    pub capturing: bool,
    /// The call's sequence number (`CollTask::seq`; for `choose`, the next one).
    pub seq: u64,
}

fn mem_name(mem: i32) -> &'static str {
    if mem == FX_MEM_CUDA {
        "cuda"
    } else {
        "host"
    }
}

/// A call as the plugins see it: the descriptor every plugin shares, and
/// the windows its buffers lie in (each plugin has its own handle for them).
struct Described {
    base: FxCollDesc,
    send_win: Option<(Arc<Entry>, u64)>,
    recv_win: Option<(Arc<Entry>, u64)>,
}

impl Described {
    /// The descriptor for plugin `i`: the base, with its window handles.
    fn for_plugin(&self, i: usize) -> FxCollDesc {
        let mut d = self.base;
        if let Some((e, off)) = &self.send_win {
            if let Some(h) = e.handles[i] {
                d.flags |= FX_COLL_SEND_WINDOW;
                d.send_win = h as *mut c_void;
                d.send_offset = *off;
            }
        }
        if let Some((e, off)) = &self.recv_win {
            if let Some(h) = e.handles[i] {
                d.flags |= FX_COLL_RECV_WINDOW;
                d.recv_win = h as *mut c_void;
                d.recv_offset = *off;
            }
        }
        d
    }

    fn in_windows(&self) -> bool {
        self.send_win.is_some() || self.recv_win.is_some()
    }
}

impl Communicator {
    /// The call check of a collective a plugin runs on host memory
    /// (`FERROCX_CHECK_CALLS`): the core's ring check, alone, completed before the
    /// plugin starts (the call blocks anyway).
    ///
    /// Stream-ordered calls are not checked: queued beside the call (tried on one
    /// H100), the check worked, but with a rank killed mid-loop the survivors' `ce`
    /// stream waits were then left blocked (5 of 6 runs, 0 of 9 without it;
    /// `bench/results/2026-11-26-h100-stop-flag/`), an interplay with issue 14's
    /// killed-peer hang not understood yet.
    ///
    /// `label` is the plugin call's: a status query sees the check as part of it
    /// (a rank still in the check and a peer already in the plugin are in one call).
    fn check_alone(&self, fp: ferrocx_algo::Fingerprint, label: Label) -> Result<()> {
        if !self.plan_cfg.check_calls {
            return Ok(());
        }
        // Host memory: on the host channels.
        let channel = self.plan_cfg.host_channel_base;
        let Some(plan) = crate::plan::Plan::check_alone(fp, self.rank(), self.nranks(), channel)
        else {
            return Ok(());
        };
        let done = self.submit_plans(vec![plan], true, label)?;
        crate::engine::Request::new(self.engine.clone(), done, true).wait()
    }

    /// `call` described for the plugins, or `None` when only the core can run
    /// this collective.
    fn describe(&self, call: &Call<'_>, seq: u64) -> Option<Described> {
        let coll = abi_coll(call.spec.kind)?;
        let (n, r, s) = (self.nranks(), self.rank(), call.spec);
        let (se, re) = s.kind.buffer_elems(s.count, n, r, s.root)?;
        // Windows are symmetric: a rank that uses no buffer on this side
        // (broadcast's non-roots send nothing, gather's receive nothing) may
        // still name one at the root's offset, so look up the larger of ours
        // and the root's extent.
        let (sr, rr) = s.kind.buffer_elems(s.count, n, s.root, s.root)?;
        let size = s.dtype.size();
        let (sb, rb) = (se.max(sr) * size, re.max(rr) * size);
        let (sw, rw) = if self.windows.is_empty() {
            (None, None)
        } else {
            (
                self.windows.lookup(call.send, sb),
                self.windows.lookup(call.recv, rb),
            )
        };
        // A buffer the rank does not use is passed as null unless it names a window.
        let keep =
            |used: usize, p: u64, w: bool| if used > 0 || call.in_place || w { p } else { 0 };
        let send = keep(se, call.send, sw.is_some());
        let recv = keep(re, call.recv, rw.is_some());
        let base = FxCollDesc {
            coll,
            dtype: s.dtype as i32,
            op: s.op as i32,
            root: s.root as i32,
            count: s.count as u64,
            mem_kind: call.mem,
            flags: if call.in_place { FX_COLL_IN_PLACE } else { 0 }
                | if call.capturing { FX_COLL_CAPTURING } else { 0 },
            send: send as *const c_void,
            recv: recv as *mut c_void,
            send_win: std::ptr::null_mut(),
            recv_win: std::ptr::null_mut(),
            send_offset: 0,
            recv_offset: 0,
            seq,
        };
        Some(Described {
            base,
            send_win: sw,
            recv_win: rw,
        })
    }

    /// Ask every plugin about `d` (the caller holds `coll_serial`); `each`
    /// sees every plugin's priority. No allocation: this runs on every call.
    fn bid(&self, d: &Described, mut each: impl FnMut(&str, i32)) -> Runner {
        Runner::best(self.colls.plugins().iter().enumerate().map(|(i, p)| {
            let prio = p.can_run(&d.for_plugin(i));
            each(p.name(), prio);
            prio
        }))
    }

    /// Who would run `call` now, with every candidate's priority and the
    /// winner's path (the core's algorithm, the plugin's own words).
    pub(crate) fn choose(&self, call: &Call<'_>) -> Choice {
        let seq = call.seq;
        let mut scores = Vec::new();
        let mut path = None;
        if let Some(d) = self.describe(call, seq) {
            // The plugins' hooks are serialized: the bids and the winner's words.
            let _serial = self.coll_serial.lock();
            if let Runner::Plugin(i) = self.bid(&d, |name, p| scores.push((name.to_string(), p))) {
                path = self.colls.plugins()[i].describe(&d.for_plugin(i));
            }
        }
        let mut choice = Choice::decide(&scores);
        let s = call.spec;
        choice.path = match choice.runner {
            Runner::Plugin(_) => path,
            Runner::Core => Some(
                self.plan_cfg
                    .algo_for(s.algo, s.kind, self.nranks(), s.plan_bytes())
                    .name()
                    .to_string(),
            ),
        };
        choice
    }

    /// Run `call` on a collective plugin if one wins it: `Ok(true)` when it
    /// ran (host) or was queued on `stream` (device), `Ok(false)` when the
    /// core must run it. `call.seq` is the number `coll_task` gave the call,
    /// equal on every rank.
    pub(crate) fn run_on_plugin(&self, call: &Call<'_>, stream: *mut c_void) -> Result<bool> {
        if self.colls.is_empty() {
            return Ok(false);
        }
        self.run_on_plugin_locked(self.coll_serial.lock(), call, stream, None)
    }

    /// A host collective on buffers (address, bytes): run by a plugin
    /// (`Ok(None)`), or validated and numbered for the core's path.
    ///
    /// A call that repeats the last one a plugin ran (the same spec, buffers
    /// and layout, no window registered, every plugin bidding by shape) was
    /// validated, described and decided then: it takes its number and goes
    /// straight to that plugin's launch (`Repeat`), which saves about a fifth
    /// of a small call's instructions.
    pub(crate) fn host_collective(
        &self,
        spec: &CollSpec,
        send: (usize, usize),
        recv: (usize, usize),
        in_place: bool,
    ) -> Result<Option<CollTask>> {
        if self.colls.is_empty() {
            return self.coll_task(spec, send, recv, in_place).map(Some);
        }
        // All-to-all-v's counts are not in the key.
        let key = spec.v.is_none().then_some(RepeatKey {
            kind: spec.kind,
            dtype: spec.dtype,
            op: spec.op,
            count: spec.count,
            root: spec.root,
            algo: spec.algo,
            send,
            recv,
            in_place,
        });
        let serial = self.coll_serial.lock();
        if let (Some(key), Some(r)) = (&key, serial.repeat) {
            if r.key == *key && self.windows.is_empty() && !Self::logs_choices() {
                self.check_live()?;
                let seq = self.shared.status.number_coll();
                self.plugins_usable()?;
                let d = r.desc(seq);
                let fp = r.fingerprint(seq);
                self.launch_on_plugin(serial, &fp, &d, r.plugin, std::ptr::null_mut())?;
                return Ok(None);
            }
        }
        let t = self.coll_task_in(&serial, spec, send, recv, in_place)?;
        let call = Call {
            spec,
            send: send.0 as u64,
            recv: recv.0 as u64,
            in_place,
            mem: FX_MEM_HOST,
            capturing: false,
            seq: t.seq,
        };
        let ran = self.run_on_plugin_locked(serial, &call, std::ptr::null_mut(), key)?;
        Ok((!ran).then_some(t))
    }

    /// Whether each call's choice is logged (`FERROCX_DEBUG=info`).
    fn logs_choices() -> bool {
        tracing::enabled!(target: "ferrocx::collective", tracing::Level::INFO)
    }

    /// A peer died or aborted, a plugin failed, or this communicator broke:
    /// a plugin that finds its peers' messages already there would otherwise
    /// still complete.
    fn plugins_usable(&self) -> Result<()> {
        self.colls.status().map_err(|e| self.engine.break_with(e))?;
        if self.shared.stop.load(std::sync::atomic::Ordering::Acquire) != 0 {
            self.shared
                .check_peers()
                .map_err(|e| self.engine.break_with(e))?;
            self.check_live()?;
            self.engine.usable()?;
        }
        Ok(())
    }

    /// [`run_on_plugin`](Self::run_on_plugin), holding `coll_serial`; `repeat`
    /// is the call's key when it may be remembered for its repeats.
    fn run_on_plugin_locked(
        &self,
        mut serial: MutexGuard<'_, HostP2p>,
        call: &Call<'_>,
        stream: *mut c_void,
        repeat: Option<RepeatKey>,
    ) -> Result<bool> {
        let seq = call.seq;
        self.plugins_usable()?;
        let Some(d) = self.describe(call, seq) else {
            return Ok(false);
        };
        // The names and priorities are kept only for the log.
        let log = Self::logs_choices();
        let mut scores = Vec::new();
        let span = spans::enter(Point::CoreBids);
        let by_shape =
            !log && call.mem == FX_MEM_HOST && !d.in_windows() && self.colls.host_bids_by_shape();
        let runner = if by_shape {
            // Every plugin asked bids on the shape alone: ask once per shape.
            let key = crate::collective::bids::CollKey::of(&d.base);
            let w = serial
                .coll_bids
                .winner(key, || match self.bid(&d, |_, _| {}) {
                    Runner::Plugin(i) => Some(i),
                    Runner::Core => None,
                });
            w.map_or(Runner::Core, Runner::Plugin)
        } else {
            self.bid(&d, |name, p| {
                if log {
                    scores.push((name.to_string(), p))
                }
            })
        };
        drop(span);
        if log {
            let choice = Choice::decide(&scores);
            let s = call.spec;
            tracing::info!(
                target: "ferrocx::collective",
                "#{seq} {} {} × {} {} {}{}: {} ({})",
                s.kind.name(),
                s.count,
                s.dtype,
                mem_name(call.mem),
                if d.in_windows() { "windows" } else { "buffers" },
                if call.in_place { ", in place" } else { "" },
                choice.winner(),
                choice.explain()
            );
        }
        let Runner::Plugin(i) = runner else {
            return Ok(false);
        };
        // A window registered since `describe` could hold a repeat's buffers.
        serial.repeat = match repeat {
            Some(key) if by_shape && self.windows.is_empty() => Some(Repeat::new(key, &d.base, i)),
            _ => None,
        };
        let s = call.spec;
        let fp = ferrocx_algo::Fingerprint::of(
            seq,
            s.kind,
            s.dtype,
            s.op,
            s.count,
            s.root,
            s.v.is_some(),
        );
        let fp = (fp, fp.encode());
        self.launch_on_plugin(serial, &fp, &d.for_plugin(i), i, stream)?;
        Ok(true)
    }

    /// Launch the call `d` describes on plugin `i`, which won it; `serial`
    /// (the plugins' hooks are serialized) is held until it returns.
    fn launch_on_plugin(
        &self,
        _serial: MutexGuard<'_, HostP2p>,
        (fp, encoded): &(ferrocx_algo::Fingerprint, [u8; 32]),
        d: &FxCollDesc,
        i: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        self.check_live()?;
        let p = self.colls.get(i)?;
        let fp = *fp;
        let host = d.mem_kind == FX_MEM_HOST;
        if host && p.checks_calls() {
            // The plugin checks the call in its own messages; it runs outside the
            // engine, so earlier asynchronous operations must be done first.
            self.engine.drain()?;
        } else if host {
            self.check_alone(fp, Label::Plugin(fp, p.shared_name()))?;
        }
        let status = &self.shared.status;
        // Host calls block this thread: recorded lock-free, as waiting (status.rs).
        if host {
            status.plugin_begin(encoded, i);
        } else {
            status.begin(Label::Plugin(fp, p.shared_name()));
        }
        let span = spans::enter(Point::CorePluginLaunch);
        // SAFETY: the buffers were validated by the caller (host slices, or device
        // buffers the caller keeps alive until the stream passes the call).
        let r = unsafe { p.launch(d, stream) };
        drop(span);
        match (&r, host) {
            (_, true) => status.plugin_end(r.is_ok()),
            (Ok(()), false) => status.finished(),
            (Err(_), false) => status.failed(),
        }
        let Err(e) = r else {
            if !host && !p.launch_bounded() {
                self.note_host_bound(|| {
                    let what = match fp.kind {
                        ferrocx_algo::fingerprint::CallKind::Coll(k) => k.name(),
                        _ => "call",
                    };
                    format!(
                        "{}'s launch of a {what} may need a host thread",
                        p.shared_name()
                    )
                });
            }
            return Ok(());
        };
        // A plugin that failed because another rank gave up reports its own symptom
        // (a wait that stopped); the other rank's reason is the cause to report.
        let e = self
            .shared
            .failure_cause(&e)
            .unwrap_or_else(|| plugin_error(e, self.shared.timeout));
        // A host collective that failed on one rank leaves the ranks out of step:
        // the communicator breaks, and the peers learn why.
        Err(if host { self.engine.break_with(e) } else { e })
    }
}

/// A plugin's failure as the core reports it: a call check's mismatch is
/// [`Error::Mismatch`], a wait that timed out [`Error::Timeout`] (which breaking
/// the communicator turns into a hang report).
pub(crate) fn plugin_error(e: Error, timeout: std::time::Duration) -> Error {
    let Error::Plugin { code, message, .. } = &e else {
        return e;
    };
    // The SDK's export layer prefixes the hook's name.
    let text = ["launch: ", "status: ", "p2p_launch: ", "comm_destroy: "]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .unwrap_or(message);
    if let Some(m) = Error::parse_mismatch(text) {
        return m;
    }
    if *code == FX_TIMEOUT {
        return Error::Timeout {
            what: format!("{e}"),
            peer: None,
            after: timeout,
        };
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(code: i32, message: &str) -> Error {
        Error::Plugin {
            plugin: "ce".into(),
            hook: "status",
            peer: None,
            code,
            message: message.into(),
        }
    }

    /// A plugin's mismatch, from launch or from status (ce's watchdog finds
    /// one after the call), is the core's `Error::Mismatch`; a timeout is
    /// `Error::Timeout`; anything else stays the plugin's error.
    #[test]
    fn plugin_errors_map_to_the_core_s() {
        let t = std::time::Duration::from_secs(5);
        let text = "mismatched calls: rank 0 called another collective as op #5 on plugin 'ce', rank 2 called all_reduce of 4000 bytes per rank as op #5 on plugin 'ce'";
        for hook in ["launch: ", "status: ", "p2p_launch: "] {
            match plugin_error(plugin(FX_REMOTE, &format!("{hook}{text}")), t) {
                Error::Mismatch { rank, peer, .. } => assert_eq!((rank, peer), (0, 2)),
                e => panic!("{e:?}"),
            }
        }
        assert!(matches!(
            plugin_error(plugin(FX_TIMEOUT, "launch: waited"), t),
            Error::Timeout { .. }
        ));
        assert!(matches!(
            plugin_error(plugin(FX_REMOTE, "status: the stream was released"), t),
            Error::Plugin { .. }
        ));
    }
}
