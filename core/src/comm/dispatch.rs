//! Per call: who runs a collective — a collective plugin (`can_run` above the
//! core's priority) or the core's own algorithms — and running it on the
//! plugin. The descriptor says which buffers lie in symmetric windows.

use super::Communicator;
use crate::collective::{abi_coll, Choice, Runner};
use crate::error::Result;
use crate::plan::CollSpec;
use ferrocx_sdk::abi::*;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// A call as the dispatcher sees it (buffers already validated).
pub(crate) struct Call<'a> {
    pub spec: &'a CollSpec,
    pub send: u64,
    pub recv: u64,
    pub in_place: bool,
    pub mem: i32,
    pub capturing: bool,
}

fn mem_name(mem: i32) -> &'static str {
    if mem == FX_MEM_CUDA {
        "cuda"
    } else {
        "host"
    }
}

impl Communicator {
    /// The descriptor of `call` for plugin `i` (its window handles), or `None`
    /// when only the core can run this collective.
    fn describe(&self, call: &Call<'_>, seq: u64) -> Option<Vec<FxCollDesc>> {
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
        Some(
            (0..self.colls.plugins().len())
                .map(|i| {
                    let mut d = base;
                    if let Some((e, off)) = &sw {
                        if let Some(h) = e.handles[i] {
                            d.flags |= FX_COLL_SEND_WINDOW;
                            d.send_win = h as *mut c_void;
                            d.send_offset = *off;
                        }
                    }
                    if let Some((e, off)) = &rw {
                        if let Some(h) = e.handles[i] {
                            d.flags |= FX_COLL_RECV_WINDOW;
                            d.recv_win = h as *mut c_void;
                            d.recv_offset = *off;
                        }
                    }
                    d
                })
                .collect(),
        )
    }

    /// Who would run `call` now, with every candidate's priority.
    pub(crate) fn choose(&self, call: &Call<'_>) -> (Choice, Vec<FxCollDesc>) {
        let seq = self.coll_seq.load(Ordering::Relaxed);
        match self.describe(call, seq) {
            Some(descs) if !self.colls.is_empty() => {
                let _serial = self.coll_serial.lock();
                let scores = self
                    .colls
                    .plugins()
                    .iter()
                    .zip(&descs)
                    .map(|(p, d)| (p.name().to_string(), p.can_run(d)))
                    .collect::<Vec<_>>();
                (Choice::decide(&scores), descs)
            }
            _ => (Choice::decide(&[]), Vec::new()),
        }
    }

    /// Run `call` on a collective plugin if one wins it: `Ok(true)` when it
    /// ran (host) or was queued on `stream` (device), `Ok(false)` when the
    /// core must run it. Every collective call passes here once, on every
    /// rank, so the sequence number stays equal everywhere.
    pub(crate) fn run_on_plugin(&self, call: &Call<'_>, stream: *mut c_void) -> Result<bool> {
        if self.colls.is_empty() {
            self.coll_seq.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        self.colls
            .status()
            .inspect_err(|e| self.engine.break_with(e.clone()))?;
        let (choice, descs) = self.choose(call);
        let seq = self.coll_seq.fetch_add(1, Ordering::Relaxed);
        let s = call.spec;
        tracing::info!(
            target: "ferrocx::collective",
            "#{seq} {} {} × {} {} {}{}: {} ({})",
            s.kind.name(),
            s.count,
            s.dtype,
            mem_name(call.mem),
            if descs.first().is_some_and(|d| d.flags & (FX_COLL_SEND_WINDOW | FX_COLL_RECV_WINDOW) != 0) { "windows" } else { "buffers" },
            if call.in_place { ", in place" } else { "" },
            choice.winner(),
            choice.explain()
        );
        let Runner::Plugin(i) = choice.runner else {
            return Ok(false);
        };
        self.check_live()?;
        let p = self.colls.get(i)?;
        let _serial = self.coll_serial.lock();
        // SAFETY: the buffers were validated by the caller (host slices, or device
        // buffers the caller keeps alive until the stream passes the call).
        unsafe { p.launch(&descs[i], stream) }?;
        Ok(true)
    }
}
