//! The launch chain: a communicator's ce launches run one after another in
//! the order they were issued, across streams and CUDA graphs, so that its
//! exchange kernels — which share control words, call counts and rings
//! (`kernels::ll`, `kernels::simple`) — never overlap, and a graph replayed
//! beside eager calls stays in line with them.
//!
//! Eager launches alone are ordered by the watchdog (`Watchdog::order`: a
//! stream other than the last one waits for the newest pending launch).
//! Graph replays are invisible to the host, so once a call is captured the
//! communicator keeps one *chain event*, the tip of everything launched:
//!
//! * a captured launch waits for the chain event with
//!   `CU_EVENT_WAIT_EXTERNAL` and records it after itself with
//!   `CU_EVENT_RECORD_EXTERNAL`: the graph gets an event wait node and an
//!   event record node, so every replay waits for what was launched before
//!   it and becomes the tip;
//! * from then on every eager launch waits for the chain event too and
//!   records it after itself;
//! * the first capture *bridges*: ce's side stream waits for the newest
//!   pending eager launch and records the chain event, so the graph also
//!   waits for eager work from before the chain existed;
//! * launches captured on forked streams of one capture (a graph's nodes
//!   with no path between them) are ordered inside the graph: each captured
//!   launch adds the previous one's record node of the same capture to its
//!   stream's capture dependencies (`cuStreamUpdateCaptureDependencies`,
//!   where the driver has it; [`Tips`] remembers the nodes).
//!
//! NCCL keeps a similar chain for graphs mixed with eager calls. As there,
//! every rank must launch its calls, eager ones and graph replays, in the
//! same order.

use crate::driver::Api;
use ferrocx_sdk::cuda::{check, sys, Event};
use ferrocx_sdk::PluginResult;

/// Captures remembered at once (older ones have ended in practice; one
/// forgotten costs only the ordering inside its graph).
const TIPS: usize = 8;

/// The last ce node of each recent capture (sans-IO: ids and node handles
/// as numbers).
#[derive(Debug, Default)]
pub struct Tips {
    /// (capture id, node), newest last.
    tips: Vec<(u64, usize)>,
}

impl Tips {
    /// The last ce node captured under `id`, if remembered.
    pub fn get(&self, id: u64) -> Option<usize> {
        self.tips.iter().find(|t| t.0 == id).map(|t| t.1)
    }

    /// `node` is now the last ce node of capture `id`.
    pub fn set(&mut self, id: u64, node: usize) {
        self.tips.retain(|t| t.0 != id);
        if self.tips.len() == TIPS {
            self.tips.remove(0);
        }
        self.tips.push((id, node));
    }
}

/// One communicator's chain (see the module's notes).
#[derive(Default)]
pub struct Chain {
    /// The chain event, from the first captured launch on.
    event: Option<Event>,
    tips: Tips,
}

/// What the driver says of a stream being captured.
struct Capture {
    id: u64,
    /// The nodes the next captured work will depend on.
    deps: Vec<usize>,
}

/// The capture `stream` is in, if any (`None` too where the driver lacks the
/// entry points).
///
/// # Safety
/// `stream` is a live stream of the bound context.
unsafe fn capture_of(api: &Api, stream: sys::CUstream) -> PluginResult<Option<Capture>> {
    let Some(c) = api.capture else {
        return Ok(None);
    };
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: the caller's contract for the stream; valid out pointers.
    let r = unsafe { (c.info)(stream, &mut status, &mut id, &mut graph, &mut deps, &mut n) };
    check(r, "cuStreamGetCaptureInfo_v2")?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return Ok(None);
    }
    let deps = if deps.is_null() || n == 0 {
        Vec::new()
    } else {
        // SAFETY: the driver returned `n` node handles at `deps`, valid until
        // the next call on this stream.
        unsafe { std::slice::from_raw_parts(deps, n) }
            .iter()
            .map(|&d| d as usize)
            .collect()
    };
    Ok(Some(Capture { id, deps }))
}

impl Chain {
    /// Wait, at most `limit`, until everything chained so far (eager launches
    /// and the graph replays the host cannot see) has completed; whether it
    /// did. True at once without a chain (the watchdog tracks eager work).
    pub fn settle(&self, limit: std::time::Duration) -> bool {
        let Some(ev) = &self.event else {
            return true;
        };
        let until = std::time::Instant::now() + limit;
        loop {
            match ev.done() {
                Ok(true) => return true,
                // An error (a failed kernel) ends the wait: nothing more will run.
                Err(_) => return true,
                Ok(false) if std::time::Instant::now() >= until => return false,
                Ok(false) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }

    /// Before an eager launch on `stream`: wait for the tip.
    ///
    /// # Safety
    /// `stream` is a live stream (or null) of the bound context.
    pub unsafe fn eager_before(&self, stream: sys::CUstream) -> PluginResult<()> {
        let Some(ev) = &self.event else {
            return Ok(());
        };
        // SAFETY: the caller's contract; a live event of the same context.
        let r = unsafe { sys::cuStreamWaitEvent(stream, ev.raw(), 0) };
        check(r, "cuStreamWaitEvent (ce's launch chain)")
    }

    /// After an eager launch on `stream`: it is the tip.
    ///
    /// # Safety
    /// As [`eager_before`](Self::eager_before).
    pub unsafe fn eager_after(&self, stream: sys::CUstream) -> PluginResult<()> {
        match &self.event {
            // SAFETY: the caller's contract.
            Some(ev) => unsafe { ev.record(stream) },
            None => Ok(()),
        }
    }

    /// Before a launch captured on `stream`: start the chain if needed
    /// (`bridge` makes the new event the tip of the eager launches so far),
    /// order after this capture's previous ce launch, wait for the tip.
    ///
    /// # Safety
    /// `stream` is a live stream of the bound context being captured.
    pub unsafe fn captured_before(
        &mut self,
        api: &Api,
        stream: sys::CUstream,
        bridge: impl FnOnce(&Event) -> PluginResult<()>,
    ) -> PluginResult<()> {
        if self.event.is_none() {
            let ev = Event::new()?;
            bridge(&ev)?;
            self.event = Some(ev);
        }
        let ev = self.event.as_ref().expect("created above");
        // SAFETY: the caller's contract.
        if let Some(cap) = unsafe { capture_of(api, stream) }? {
            if let (Some(tip), Some(c)) = (self.tips.get(cap.id), api.capture) {
                if !cap.deps.contains(&tip) {
                    let mut node = tip as sys::CUgraphNode;
                    // SAFETY: `node` is a node of this capture's graph (same id),
                    // which lives until the capture ends; flags 0: add.
                    let r = unsafe { (c.update)(stream, &mut node, 1, 0) };
                    check(r, "cuStreamUpdateCaptureDependencies (ce's launch chain)")?;
                }
            }
        }
        // SAFETY: the caller's contract; a live event of the same context.
        let r = unsafe {
            sys::cuStreamWaitEvent(
                stream,
                ev.raw(),
                sys::CUevent_wait_flags_enum::CU_EVENT_WAIT_EXTERNAL as u32,
            )
        };
        check(r, "cuStreamWaitEvent (external, ce's launch chain)")
    }

    /// After a launch captured on `stream`: record the tip, remember the
    /// record node for the capture's next ce launch.
    ///
    /// # Safety
    /// As [`captured_before`](Self::captured_before), which ran first.
    pub unsafe fn captured_after(&mut self, api: &Api, stream: sys::CUstream) -> PluginResult<()> {
        let Some(ev) = &self.event else {
            return Ok(());
        };
        // SAFETY: the caller's contract; a live event of the same context.
        let r = unsafe {
            sys::cuEventRecordWithFlags(
                ev.raw(),
                stream,
                sys::CUevent_record_flags_enum::CU_EVENT_RECORD_EXTERNAL as u32,
            )
        };
        check(r, "cuEventRecordWithFlags (external, ce's launch chain)")?;
        // SAFETY: as above.
        if let Some(cap) = unsafe { capture_of(api, stream) }? {
            if let [node] = cap.deps[..] {
                self.tips.set(cap.id, node);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tips_keep_the_last_node_of_each_recent_capture() {
        let mut t = Tips::default();
        assert_eq!(t.get(1), None);
        t.set(1, 10);
        t.set(2, 20);
        t.set(1, 11);
        assert_eq!((t.get(1), t.get(2)), (Some(11), Some(20)));
        for id in 3..3 + TIPS as u64 {
            t.set(id, id as usize);
        }
        // The oldest captures are forgotten first (2, then 1).
        assert_eq!((t.get(1), t.get(2)), (None, None));
        assert_eq!(t.get(3 + TIPS as u64 - 1), Some(3 + TIPS - 1));
        assert_eq!(t.tips.len(), TIPS);
    }
}
