//! `ce-hang`: the last rank never makes a small device all_reduce, which ce
//! runs as one LL kernel on the others. They must get an error within
//! `FERROCX_TIMEOUT` and a little (the kernel ends its own wait; the
//! watchdog names the call), never hang; the last rank waits that long, then
//! leaves.

use super::device::{sync, DevMem};
use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, RedOp};
use std::time::{Duration, Instant};

pub fn run() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let timeout = Duration::from_secs(
        std::env::var("FERROCX_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(60),
    );
    if me == n - 1 {
        std::thread::sleep(timeout + Duration::from_secs(8));
        return Ok(format!("rank {me} skipped the call"));
    }
    let stream = ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?;
    let (send, recv) = (DevMem::new(4000)?, DevMem::new(4000)?);
    let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, 1000).op(RedOp::Sum);
    let choice = comm
        .collective_choice(&spec, send.ptr, recv.ptr, false, true)
        .map_err(e2s)?;
    if choice.winner() != "ce" {
        return Err(format!("ce does not run it: {}", choice.explain()));
    }
    println!("runs on ce ({})", choice.path.as_deref().unwrap_or("-"));
    let t = Instant::now();
    // SAFETY: live stream and buffers; synchronized below.
    unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, &stream) }.map_err(e2s)?;
    // The kernel ends its own wait, so the stream comes back.
    sync(&stream)?;
    loop {
        if let Err(e) = comm.device_error() {
            return Ok(format!(
                "ERROR after {:.1}s: {e}",
                t.elapsed().as_secs_f64()
            ));
        }
        if t.elapsed() > timeout + Duration::from_secs(20) {
            return Err(format!("no error {:?} after the call", t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
