//! A communicator let go while another thread of the process captures a CUDA
//! graph in global mode (the driver's default and `torch.cuda.graph`'s): the
//! frees on its way out (a plugin's `comm_destroy` after `abort`, the
//! communicator's own device buffers) are ferrocx's driver calls, and global
//! mode forbids such calls on every thread that is not relaxed — the driver
//! then fails them and invalidates the other thread's capture.

use super::device::{begin_capture, instantiate, replay_back_to_back, sync, CaptureMode, DevMem};
use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType};
use ferrocx_sdk::cuda::{self, sys, Context, Stream};
use std::sync::mpsc;

const BLOCK: usize = 4096;
/// Words the captured memset writes.
const WORDS: usize = 1024;

fn byte(rank: usize, j: usize) -> u8 {
    (rank * 37 + j * 11 + 1) as u8
}

/// `how`: `abort` (abort, then drop) or `drop` (dropped live: the drop
/// destroys it). Before: windows registered on both buffers and an eager
/// all_gather on them, checked. Then another thread begins a global capture,
/// the communicator is let go, and the capture (one memset) must end whole
/// and its graph replay write every word.
pub fn dropped_in_capture(how: &str) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let bytes = n * BLOCK;
    let (send, recv) = (DevMem::outside(bytes)?, DevMem::outside(bytes)?);
    let dev = cuda::device_of(send.ptr as usize).ok_or("the buffer is on no device")?;
    // Keeps the context, and with it these buffers, alive past the communicator.
    let _ctx = Context::primary(dev).map_err(|e| e.to_string())?;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    // SAFETY: both allocations outlive the communicator (dropped below).
    unsafe {
        comm.window_register_device(send.ptr, bytes).map_err(e2s)?;
        comm.window_register_device(recv.ptr, bytes).map_err(e2s)?;
    }
    let mine: Vec<u8> = (0..bytes).map(|j| byte(me, j % BLOCK)).collect();
    send.upload(&mine)?;
    let spec = CollSpec::new(CollKind::AllGather, DataType::U8, BLOCK);
    // SAFETY: the windows are alive until the stream is synchronized below.
    unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, &stream) }.map_err(e2s)?;
    sync(&stream)?;
    let mut got = vec![0u8; bytes];
    recv.download(&mut got)?;
    if let Some(j) = (0..bytes).find(|&j| got[j] != byte(j / BLOCK, j % BLOCK)) {
        return Err(format!(
            "the all_gather before: byte {j} is {:#04x}",
            got[j]
        ));
    }
    let (capturing_tx, capturing) = mpsc::channel::<()>();
    let (gone_tx, gone) = mpsc::channel::<()>();
    let value = 0x5eed_0000 | me as u32;
    let capture = std::thread::spawn(move || -> Result<(), String> {
        let ctx = Context::primary(dev).map_err(|e| e.to_string())?;
        ctx.bind().map_err(|e| e.to_string())?;
        let words = DevMem::outside(WORDS * 4)?;
        let s = Stream::new().map_err(|e| e.to_string())?;
        begin_capture(&s, CaptureMode::Global)?;
        let _ = capturing_tx.send(());
        let _ = gone.recv();
        // SAFETY: a live allocation of WORDS words; `s` is capturing.
        let set = unsafe { sys::cuMemsetD32Async(words.ptr, value, WORDS, s.raw()) };
        let mut g: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; `g` is a valid out pointer.
        let end = unsafe { sys::cuStreamEndCapture(s.raw(), &mut g) };
        cuda::check(set, "cuMemsetD32Async (captured)")
            .and_then(|_| cuda::check(end, "cuStreamEndCapture"))
            .map_err(|e| format!("the capture beside the communicator's drop: {e}"))?;
        let exec = instantiate(g)?;
        let done = replay_back_to_back(exec, &s, 1);
        // SAFETY: destroyed once, after its launch completed (or never ran).
        unsafe {
            sys::cuGraphExecDestroy(exec);
            sys::cuGraphDestroy(g);
        }
        done?;
        let mut out = vec![0u8; WORDS * 4];
        words.download(&mut out)?;
        match out
            .chunks_exact(4)
            .position(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) != value)
        {
            Some(i) => Err(format!("the replayed memset left word {i} unwritten")),
            None => Ok(()),
        }
    });
    capturing
        .recv()
        .map_err(|_| "the capturing thread ended before its capture")?;
    match how {
        "abort" => comm.abort(),
        "drop" => {}
        other => return Err(format!("unknown way to let go: {other}")),
    }
    drop(comm);
    let _ = gone_tx.send(());
    capture
        .join()
        .map_err(|_| "the capturing thread panicked".to_string())??;
    Ok(format!(
        "rank {me}: the communicator ({how}) dropped during another thread's global capture; the capture whole, its replay checked"
    ))
}
