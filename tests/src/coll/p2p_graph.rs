//! Device sends and receives captured into a CUDA graph (`p2p-graph`):
//! `CALLS` ring exchanges (send to the right, receive from the left, one
//! group each) captured once and replayed with new messages every time,
//! with eager ring exchanges on another stream just before and after each
//! replay (`--mixed`, waiting for nothing); every byte and canary checked.
//! `--timed N`: then N replays back to back, the time per exchange printed.
//! `--refused`: no plugin takes captured device messages
//! (`FERROCX_CE_GRAPH_KERNELS=0`): the first captured exchange must fail on
//! every rank with the core's clear refusal, nothing queued, and an eager
//! exchange right after must arrive whole.

use super::device::{begin_capture, instantiate, replay_back_to_back, sync, CaptureMode, DevMem};
use super::{e2s, CANARY, TAIL};
use ferrocx::Communicator;
use ferrocx_sdk::cuda::{check, sys, Stream};

const CALLS: usize = 4;

/// Byte `i` of the message `from` sends in round `round`.
fn byte(from: usize, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(151) ^ (from * 29 + round * 103)) as u8
}

fn message(from: usize, len: usize, round: usize) -> Vec<u8> {
    (0..len).map(|i| byte(from, round, i)).collect()
}

/// One ring exchange's buffers: the message out, the receive with its canary.
struct Ring {
    out: DevMem,
    inp: DevMem,
}

impl Ring {
    fn new(len: usize) -> Result<Ring, String> {
        Ok(Ring {
            out: DevMem::new(len.max(1))?,
            inp: DevMem::new(len + TAIL)?,
        })
    }

    /// This round's message out, zeros and the canary in.
    fn fill(&self, me: usize, len: usize, round: usize) -> Result<(), String> {
        self.out.upload(&message(me, len, round))?;
        let mut init = vec![0u8; len];
        init.extend_from_slice(&[CANARY; TAIL]);
        self.inp.upload(&init)
    }

    fn check(&self, left: usize, len: usize, round: usize, what: &str) -> Result<(), String> {
        let mut got = vec![0u8; len + TAIL];
        self.inp.download(&mut got)?;
        let want = message(left, len, round);
        if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
            return Err(format!(
                "{what} (round {round}): byte {i} of {len} from rank {left} is {:#x}, want {:#x}",
                got[i], want[i]
            ));
        }
        if got[len..].iter().any(|&b| b != CANARY) {
            return Err(format!("{what} (round {round}): the canary changed"));
        }
        Ok(())
    }

    /// Queue the exchange on `stream`.
    ///
    /// # Safety
    /// The buffers outlive the stream's work; `stream` is live.
    unsafe fn post(
        &self,
        comm: &Communicator,
        len: usize,
        right: usize,
        left: usize,
        stream: sys::CUstream,
    ) -> Result<(), String> {
        let mut g = comm.group_start();
        // SAFETY: the caller's contract.
        unsafe {
            g.send_on(self.out.ptr, len, right, stream).map_err(e2s)?;
            g.recv_on(self.inp.ptr, len, left, stream).map_err(e2s)?;
        }
        g.group_end().map_err(e2s)
    }
}

/// `p2p-graph LEN [--replays R] [--mixed] [--timed N] [--expect ce|core] [--refused]
/// [--capture relaxed|global|thread]`.
pub fn run(
    len: usize,
    replays: usize,
    mixed: bool,
    timed: usize,
    expect: Option<String>,
    refused: bool,
    capture: CaptureMode,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    if let Some(want) = expect.as_deref() {
        for send in [true, false] {
            let got = comm.device_p2p_runner(send, len, right).map_err(e2s)?;
            if got != want {
                return Err(format!(
                    "a device message of {len} bytes runs on {got}, expected {want}"
                ));
            }
        }
    }
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let eager = Stream::new().map_err(|e| e.to_string())?;
    let s = stream.raw();
    let rings: Vec<Ring> = (0..CALLS)
        .map(|_| Ring::new(len))
        .collect::<Result<_, _>>()?;
    let around: Vec<Ring> = (0..2).map(|_| Ring::new(len)).collect::<Result<_, _>>()?;
    begin_capture(&stream, capture)?;
    let mut captured = Ok(());
    for (k, r) in rings.iter().enumerate() {
        // SAFETY: the buffers outlive the graph's replays.
        captured = unsafe { r.post(&comm, len, right, left, s) }
            .map_err(|e| format!("capturing exchange {k}: {e}"));
        if captured.is_err() {
            break;
        }
    }
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above; a valid out pointer.
    let end = check(
        unsafe { sys::cuStreamEndCapture(s, &mut g) },
        "cuStreamEndCapture",
    );
    if refused {
        let said = match captured {
            Err(e)
                if e.contains("capturing exchange 0")
                    && e.contains("the core's own device path cannot be captured") =>
            {
                e
            }
            other => {
                return Err(format!(
                    "expected the core to refuse the captured exchange, got {other:?}"
                ))
            }
        };
        if !g.is_null() {
            // SAFETY: the (empty) graph the capture returned, destroyed once.
            unsafe { sys::cuGraphDestroy(g) };
        }
        // Nothing was queued: an eager exchange still pairs up.
        rings[0].fill(me, len, 7)?;
        // SAFETY: the buffers outlive the stream's work (synchronized below).
        unsafe { rings[0].post(&comm, len, right, left, s) }?;
        sync(&stream)?;
        rings[0].check(left, len, 7, "the eager exchange after the refusal")?;
        comm.barrier().map_err(e2s)?;
        comm.destroy().map_err(e2s)?;
        return Ok(format!(
            "rank {me}: REFUSED {said}; the eager exchange after it arrived whole"
        ));
    }
    captured?;
    end.map_err(|e| e.to_string())?;
    let exec = instantiate(g)?;
    let mut result = Ok(());
    'replay: for rep in 0..replays {
        let round = |k: usize| rep * (CALLS + 2) + k;
        for (k, r) in rings.iter().chain(&around).enumerate() {
            r.fill(me, len, round(k))?;
        }
        if mixed {
            // SAFETY: the buffers outlive both streams' work (synchronized below).
            if let Err(e) = unsafe { around[0].post(&comm, len, right, left, eager.raw()) } {
                result = Err(format!("replay {rep}, eager exchange before: {e}"));
                break;
            }
        }
        // SAFETY: an instantiated graph; a live stream.
        if let Err(e) = check(unsafe { sys::cuGraphLaunch(exec, s) }, "cuGraphLaunch") {
            result = Err(format!("replay {rep}: {e}"));
            break;
        }
        if mixed {
            // SAFETY: as above.
            if let Err(e) = unsafe { around[1].post(&comm, len, right, left, eager.raw()) } {
                result = Err(format!("replay {rep}, eager exchange after: {e}"));
                break;
            }
        }
        if let Err(e) = sync(&stream).and_then(|_| sync(&eager)) {
            result = Err(format!("replay {rep}: {e}"));
            break;
        }
        let checked = if mixed { CALLS + 2 } else { CALLS };
        for (k, r) in rings.iter().chain(&around).enumerate().take(checked) {
            if let Err(e) = r.check(left, len, round(k), &format!("replay {rep}, exchange {k}")) {
                result = Err(e);
                break 'replay;
            }
        }
    }
    let mut timing = String::new();
    if result.is_ok() && timed > 0 {
        match replay_back_to_back(exec, &stream, timed) {
            Ok(t) => {
                let us = t.as_secs_f64() * 1e6 / (timed * CALLS) as f64;
                timing = format!("; TIMED {len} B: {us:.2} us per exchange");
            }
            Err(e) => result = Err(e),
        }
    }
    // SAFETY: destroyed once, after the last replay completed (synchronized above).
    unsafe {
        sys::cuGraphExecDestroy(exec);
        sys::cuGraphDestroy(g);
    }
    result?;
    comm.device_error().map_err(e2s)?;
    comm.barrier().map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {CALLS} ring exchanges of {len} B in a graph ({capture:?} capture){} replayed {replays} times, every byte checked{timing}",
        if mixed { ", eager ones on another stream around each replay" } else { "" }
    ))
}
