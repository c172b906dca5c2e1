//! `ce-direct-asym`: a call whose windows are not symmetric, on 2 ranks with
//! ce's direct modes forced (`FERROCX_CE_DIRECT_BYTES`, the LL kernel off):
//! rank 0 all_reduces in place at one offset of its window, rank 1 out of
//! place from another offset into that one, so rank 0 would read rank 1's
//! output as its input. The kernel's first chunk carries each rank's
//! offsets: both ranks must get the error naming the other (no timeout),
//! and neither buffer may change.

use super::device::{sync, DevMem};
use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, RedOp};
use std::time::{Duration, Instant};

pub fn run() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    if n != 2 {
        return Err(format!("ce-direct-asym runs on 2 ranks, not {n}"));
    }
    let stream = ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?;
    let count = 1 << 18; // 1 MiB of f32: above any LL limit
    let bytes = 4 * count;
    // Both ranks carve the same buffers from the arena: the window over it is
    // symmetric; the call's offsets are not.
    let buf = DevMem::new(2 * bytes)?;
    let pattern: Vec<u8> = (0..2 * bytes).map(|i| (i * 7 + me * 3 + 1) as u8).collect();
    buf.upload(&pattern)?;
    let (base, len) = super::device::arena()?;
    // SAFETY: the arena stays allocated for the life of this thread.
    let _w = unsafe { comm.window_register_device(base, len) }.map_err(e2s)?;
    let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, count).op(RedOp::Sum);
    let (send, recv) = if me == 0 {
        (buf.ptr, buf.ptr)
    } else {
        (buf.ptr + bytes as u64, buf.ptr)
    };
    let choice = comm
        .collective_choice(&spec, send, recv, me == 0, true)
        .map_err(e2s)?;
    if choice.winner() != "ce" {
        return Err(format!("ce does not run it: {}", choice.explain()));
    }
    let t = Instant::now();
    // SAFETY: live stream and buffers (in the arena's window); synchronized below.
    unsafe {
        if me == 0 {
            comm.collective_in_place_on(&spec, buf.ptr, &stream)
        } else {
            comm.collective_on(&spec, send, recv, &stream)
        }
    }
    .map_err(e2s)?;
    sync(&stream)?;
    let other = 1 - me;
    loop {
        if let Err(e) = comm.device_error() {
            let text = e.to_string();
            if !text.contains(&format!(
                "rank {other}'s buffer for this call is not where rank {me}'s window puts it"
            )) {
                return Err(format!("another error than the windows' offsets: {text}"));
            }
            let mut after = vec![0u8; 2 * bytes];
            buf.download(&mut after)?;
            if after != pattern {
                return Err("the buffers changed".into());
            }
            return Ok(format!(
                "ERROR after {:.2}s: {text}",
                t.elapsed().as_secs_f64()
            ));
        }
        if t.elapsed() > Duration::from_secs(20) {
            return Err(format!("no error {:?} after the call", t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
