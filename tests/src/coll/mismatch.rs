//! `mismatch CASE`: ranks that make different calls (issue 16's three cases, as a
//! new user made them) must each get `Error::Mismatch` naming both calls, never
//! `Ok`. `mismatch off-CASE`: the same with `FERROCX_CHECK_CALLS=0` set by the
//! test: no mismatch error (proves the switch, nothing about the data).
//! `mismatch later-CASE`: with `FERROCX_CHECK_CALLS=deferred` set by the test, a
//! rank whose differing call took nothing from its peers (a root) may return `Ok`
//! from it; its next call (an all-reduce) must then fail with `Error::Mismatch`.
//! `mismatch last-CASE`: the same, but the differing call is the last: the rank's
//! `destroy` must fail with `Error::Mismatch` instead.

use ferrocx::{CollKind, CollSpec, Communicator, DataType, Error, RedOp};

const N: usize = 1000;

/// The outcome of the call that disagrees: `Err(e)` expected.
fn call(comm: &Communicator, case: &str) -> Result<ferrocx::Result<()>, String> {
    let me = comm.rank();
    Ok(match case {
        // Rank 0 reduces f32, the others i32 of the same byte length.
        "type" => {
            let dtype = if me == 0 {
                DataType::F32
            } else {
                DataType::I32
            };
            let spec = CollSpec::new(CollKind::AllReduce, dtype, N).op(RedOp::Sum);
            let send = vec![1u8; N * 4];
            let mut recv = vec![0u8; N * 4];
            comm.collective(&spec, &send, &mut recv)
        }
        // Every rank believes it is the root; small (eager) and large (rendezvous).
        "root" | "root-large" => {
            let n = if case == "root" { N } else { 1 << 20 };
            let spec = CollSpec::new(CollKind::Broadcast, DataType::F32, n).root(me);
            let mut buf = vec![0u8; n * 4];
            comm.collective_in_place(&spec, &mut buf)
        }
        // Rank 1 makes one all_reduce fewer, then everyone broadcasts the same size.
        "skip" => {
            let mut x = vec![me as i32; N];
            let calls = if me == 1 { 1 } else { 2 };
            for _ in 0..calls {
                let send = x.clone();
                if let Err(e) = comm.all_reduce(&send, &mut x, RedOp::Sum) {
                    return Ok(Err(e));
                }
            }
            let spec = CollSpec::new(CollKind::Broadcast, DataType::I32, N).root(0);
            let mut buf = vec![0u8; N * 4];
            comm.collective_in_place(&spec, &mut buf)
        }
        // Rank 1 makes one broadcast from rank 0 fewer: nobody takes rank 0's last.
        "fewer" => {
            let calls = if me == 1 { 1 } else { 2 };
            for _ in 0..calls {
                let spec = CollSpec::new(CollKind::Broadcast, DataType::F32, N).root(0);
                let mut buf = vec![0u8; N * 4];
                if let Err(e) = comm.collective_in_place(&spec, &mut buf) {
                    return Ok(Err(e));
                }
            }
            Ok(())
        }
        // After one all-reduce (connections made), rank 0 sends 4000 bytes to rank 1,
        // then all ranks all-reduce 4000 bytes: rank 1's all-reduce meets the send.
        // (A send may complete before its receiver checks it: then rank 0's
        // all-reduce fails.)
        "send" => {
            let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, N).op(RedOp::Sum);
            let send = vec![1u8; N * 4];
            let mut recv = vec![0u8; N * 4];
            if let Err(e) = comm.collective(&spec, &send, &mut recv) {
                return Ok(Err(e));
            }
            if me == 0 {
                if let Err(e) = comm.send(&send, 1) {
                    return Ok(Err(e));
                }
            }
            comm.collective(&spec, &send, &mut recv)
        }
        // After one all-reduce, rank 1 receives 4000 bytes from rank 0 while the
        // others all-reduce again: the all-reduce's first message meets the receive.
        "recv" => {
            let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, N).op(RedOp::Sum);
            let send = vec![1u8; N * 4];
            let mut recv = vec![0u8; N * 4];
            if let Err(e) = comm.collective(&spec, &send, &mut recv) {
                return Ok(Err(e));
            }
            if me == 1 {
                comm.recv(&mut recv, 0)
            } else {
                comm.collective(&spec, &send, &mut recv)
            }
        }
        // All-gathers on symmetric windows, run by the collective plugin the test
        // loads (`cma`): rank 0 gathers 100 bytes per rank, the others 200.
        "plugin" => {
            let n = comm.nranks();
            let count = if me == 0 { 100 } else { 200 };
            let mut send = vec![me as u8; 200];
            let mut recv = vec![0u8; 200 * n];
            let ws = comm.window_register(&mut send).map_err(|e| e.to_string())?;
            let wr = comm.window_register(&mut recv).map_err(|e| e.to_string())?;
            let spec = CollSpec::new(CollKind::AllGather, DataType::U8, count);
            let (sp, rp) = (send.as_ptr() as u64, recv.as_mut_ptr() as u64);
            let choice = comm
                .collective_choice(&spec, sp, rp, false, false)
                .map_err(|e| e.to_string())?;
            if choice.winner() != "cma" {
                return Err(format!("the plugin does not run it: {}", choice.explain()));
            }
            let r = comm.collective(&spec, &send[..count], &mut recv[..count * n]);
            let _ = comm.window_deregister(ws);
            let _ = comm.window_deregister(wr);
            r
        }
        // Rank 0 puts its small all-reduce in a group (groups run on the core), the
        // others do not (shm-coll runs theirs): one call on two paths.
        "group" => {
            let send = vec![me as i32; 8];
            let mut recv = vec![0i32; 8];
            if me == 0 {
                let mut g = comm.group_start();
                if let Err(e) = g.all_reduce(&send, &mut recv, RedOp::Sum) {
                    return Ok(Err(e));
                }
                g.group_end()
            } else {
                comm.all_reduce(&send, &mut recv, RedOp::Sum)
            }
        }
        // All-reduces on device windows run by ce (its call check is on by default):
        // rank 0 reduces f32, the others i32. ce finds it after the call (its
        // watchdog compares the ranks' notes): the error comes from device_error.
        "ce-type" => {
            let dtype = if me == 0 {
                DataType::F32
            } else {
                DataType::I32
            };
            let stream = ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?;
            let (send, recv) = (
                super::device::DevMem::new(N * 4)?,
                super::device::DevMem::new(N * 4)?,
            );
            // SAFETY: both allocations outlive the windows (deregistered below).
            let (ws, wr) = unsafe {
                (
                    comm.window_register_device(send.ptr, N * 4)
                        .map_err(|e| e.to_string())?,
                    comm.window_register_device(recv.ptr, N * 4)
                        .map_err(|e| e.to_string())?,
                )
            };
            let spec = CollSpec::new(CollKind::AllReduce, dtype, N).op(RedOp::Sum);
            let choice = comm
                .collective_choice(&spec, send.ptr, recv.ptr, false, true)
                .map_err(|e| e.to_string())?;
            if choice.winner() != "ce" {
                return Err(format!("ce does not run it: {}", choice.explain()));
            }
            // SAFETY: live stream and windows; synchronized below.
            let r =
                unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, &stream) }.and_then(|_| {
                    super::device::sync(&stream).map_err(Error::InvalidArgument)?;
                    // The watchdog compares within its poll period.
                    device_error_within(comm, 5)
                });
            // Later ce calls fail too.
            // SAFETY: as above.
            let again = unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, &stream) };
            let _ = super::device::sync(&stream);
            let _ = comm.window_deregister(ws);
            let _ = comm.window_deregister(wr);
            if r.is_err() && again.is_ok() {
                return Err("ce ran a call after it found mismatched calls".into());
            }
            r
        }
        // The device forms of "send" and "recv" on the core's path (the test
        // turns ce off): the error comes from the stream's operations, through
        // `device_error` once the stream has passed them.
        "dev-send" | "dev-recv" => {
            use super::device::{sync, DevMem};
            let stream = ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?;
            let (send, recv) = (DevMem::new(N * 4)?, DevMem::new(N * 4)?);
            let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, N).op(RedOp::Sum);
            let choice = comm
                .collective_choice(&spec, send.ptr, recv.ptr, false, true)
                .map_err(|e| e.to_string())?;
            let p2p = comm
                .device_p2p_runner(true, N * 4, 1 - me.min(1))
                .map_err(|e| e.to_string())?;
            if choice.winner() != "core" || p2p != "core" {
                return Err(format!(
                    "the core does not run these: {}; sends: {p2p}",
                    choice.explain()
                ));
            }
            // SAFETY: live stream and buffers, synchronized before they drop.
            let queued = unsafe {
                comm.collective_on(&spec, send.ptr, recv.ptr, &stream)
                    .and_then(|()| sync(&stream).map_err(Error::InvalidArgument))
                    .and_then(|()| match (case, me) {
                        ("dev-send", 0) => comm.send_on(send.ptr, N * 4, 1, &stream),
                        ("dev-recv", 1) => comm.recv_on(recv.ptr, N * 4, 0, &stream),
                        _ => Ok(()),
                    })
                    .and_then(|()| match (case, me) {
                        ("dev-recv", 1) => Ok(()),
                        _ => comm.collective_on(&spec, send.ptr, recv.ptr, &stream),
                    })
            };
            let synced = sync(&stream).map_err(Error::InvalidArgument);
            // A peer's abort notice may come a moment after this rank's
            // operations completed.
            queued
                .and(synced)
                .and_then(|()| device_error_within(comm, 10))
        }
        other => return Err(format!("unknown mismatch case {other}")),
    })
}

/// `device_error` polled for `secs` seconds: its first error, else `Ok`.
fn device_error_within(comm: &Communicator, secs: u64) -> ferrocx::Result<()> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        comm.device_error()?;
        if std::time::Instant::now() > until {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn run(case: &str) -> Result<String, String> {
    let comm = match Communicator::from_env() {
        Ok(c) => c,
        // A rank still joining when the others already found the mismatch and
        // aborted learns it from their notice: that is its error too.
        Err(e @ Error::Mismatch { .. }) if !case.starts_with("off-") => {
            return Ok(format!("MISMATCH {e} (while joining)"))
        }
        Err(e) => return Err(e.to_string()),
    };
    let (off, case) = match case.strip_prefix("off-") {
        Some(c) => (true, c),
        None => (false, case),
    };
    let (later, case) = match case.strip_prefix("later-") {
        Some(c) => (true, c),
        None => (false, case),
    };
    let (last, case) = match case.strip_prefix("last-") {
        Some(c) => (true, c),
        None => (false, case),
    };
    let mut r = call(&comm, case)?;
    if last {
        // Destroy is collective: every rank calls it, also one whose call failed.
        let destroyed = comm.destroy();
        if r.is_ok() {
            r = destroyed;
        }
    }
    if later && r.is_ok() {
        let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, N).op(RedOp::Sum);
        let mut x = vec![0u8; N * 4];
        r = comm.collective_in_place(&spec, &mut x);
    }
    if off {
        return match r {
            Err(e @ Error::Mismatch { .. }) => Err(format!("checks are off, yet: {e}")),
            _ => Ok(format!(
                "no mismatch reported with FERROCX_CHECK_CALLS=0 ({r:?})"
            )),
        };
    }
    match r {
        Ok(()) => Err(format!("{case}: Ok although the ranks' calls differ")),
        Err(e @ Error::Mismatch { .. }) if case.starts_with("ce-") => Ok(format!("MISMATCH {e}")),
        Err(e @ Error::Mismatch { .. }) => {
            // What a program sees later: the communicator stays broken.
            let again = comm.barrier();
            if again.is_ok() {
                return Err(format!("{case}: the communicator still works after: {e}"));
            }
            Ok(format!("MISMATCH {e}"))
        }
        Err(e) => Err(format!("{case}: expected Error::Mismatch, got {e:?}")),
    }
}

/// `run-ahead` (run with `FERROCX_CHECK_CALLS=0` or `deferred`, 3 ranks, rings 4 deep:
/// `FERROCX_SHM_COLL_MEMORY=2359296`): a correct program in which ranks run
/// ahead of each other for long — rank 2 naps 1.5 s, then every rank makes 5
/// small broadcasts from rank 0 (shm-coll's root posts 4, then the fifth to
/// rank 1 and waits for a slot towards rank 2; rank 1 is done with all 5),
/// then rank 0 sends 1 MiB to rank 1 (the core's path). Nothing may call that
/// a mismatch: rank 1 waits in its receive while rank 0 still waits in a
/// broadcast rank 1 has finished. Every byte is checked.
pub fn run_ahead() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(super::e2s)?;
    let me = comm.rank();
    if me == 2 {
        std::thread::sleep(std::time::Duration::from_millis(1500));
    }
    for i in 0..5u32 {
        let spec = CollSpec::new(CollKind::Broadcast, DataType::U32, 4).root(0);
        let mut buf: Vec<u8> = if me == 0 {
            [i; 4].iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            vec![0; 16]
        };
        comm.collective_in_place(&spec, &mut buf)
            .map_err(|e| format!("rank {me}: broadcast #{i}: {e}"))?;
        if buf.chunks(4).any(|c| c != i.to_le_bytes()) {
            return Err(format!("rank {me}: broadcast #{i} gave {buf:?}"));
        }
    }
    let big: Vec<u8> = (0..1usize << 20).map(|j| (j % 251) as u8).collect();
    match me {
        0 => comm
            .send(&big, 1)
            .map_err(|e| format!("rank 0: send: {e}"))?,
        1 => {
            let mut got = vec![0u8; big.len()];
            comm.recv(&mut got, 0)
                .map_err(|e| format!("rank 1: receive: {e}"))?;
            if got != big {
                return Err("rank 1: the 1 MiB message differs".into());
            }
        }
        _ => {}
    }
    comm.barrier()
        .map_err(|e| format!("rank {me}: barrier: {e}"))?;
    Ok(format!("rank {me}: ran ahead, no mismatch"))
}
