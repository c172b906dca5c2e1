//! Device sends and receives (`*_on`): rings (on one stream and on two),
//! pairs posted in opposite orders, all-to-all groups, several messages to
//! one peer in one group, at sizes around the point-to-point kernel's
//! chunking and limit; every byte and every receive buffer's canary tail
//! checked, and (with `expect`) each message's runner asserted: `ce` up to
//! `FERROCX_CE_P2P_BYTES`, the core above.

use super::device::{sync, DevMem};
use super::{e2s, CANARY, TAIL};
use ferrocx::Communicator;
use ferrocx_sdk::cuda::Stream;

/// Byte `i` of the message `from` sends `to` in round `round` (every pair,
/// size and round differs).
fn byte(from: usize, to: usize, len: usize, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (from * 31 + to * 7 + len * 3 + round * 101)) as u8
}

fn message(from: usize, to: usize, len: usize, round: usize) -> Vec<u8> {
    (0..len).map(|i| byte(from, to, len, round, i)).collect()
}

/// A receive buffer: `len` bytes of zeros, then the canary.
fn recv_buf(len: usize) -> Result<DevMem, String> {
    let m = DevMem::new(len + TAIL)?;
    let mut init = vec![0u8; len];
    init.extend_from_slice(&[CANARY; TAIL]);
    m.upload(&init)?;
    Ok(m)
}

fn check(
    m: &DevMem,
    from: usize,
    to: usize,
    len: usize,
    round: usize,
    what: &str,
) -> Result<(), String> {
    let mut out = vec![0u8; len + TAIL];
    m.download(&mut out)?;
    let want = message(from, to, len, round);
    if let Some(i) = (0..len).find(|&i| out[i] != want[i]) {
        return Err(format!(
            "{what}: {len} bytes from rank {from} to rank {to} (round {round}): byte {i} is {:#x}, want {:#x}",
            out[i], want[i]
        ));
    }
    if out[len..].iter().any(|&b| b != CANARY) {
        return Err(format!(
            "{what}: {len} bytes from rank {from}: the canary after them changed"
        ));
    }
    Ok(())
}

/// `p2p-device [--expect ce|core] [--sizes a,b,…]`.
pub fn run(expect: Option<String>, sizes: &[usize]) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let s = stream.raw();
    let stream2 = Stream::new().map_err(|e| e.to_string())?;
    let limit = std::env::var("FERROCX_CE_P2P_BYTES")
        .ok()
        .and_then(|v| ferrocx_sdk::env::parse_unsigned(&v))
        .unwrap_or(16 << 20); // ce's default
    let route = |len: usize, peer: usize| -> Result<(), String> {
        let Some(want) = expect.as_deref() else {
            return Ok(());
        };
        let want = if want == "ce" && len > limit {
            "core"
        } else {
            want
        };
        for send in [true, false] {
            let got = comm.device_p2p_runner(send, len, peer).map_err(e2s)?;
            if got != want {
                return Err(format!(
                    "a device {} of {len} bytes with rank {peer} runs on {got}, expected {want}",
                    if send { "send" } else { "receive" }
                ));
            }
        }
        Ok(())
    };
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut msgs = 0usize;
    for round in 0..2 {
        for &len in sizes {
            route(len, right)?;
            // Sends to the rank itself: ce's kernel copies them too.
            route(len, me)?;
            // A ring: one group per rank.
            let out = DevMem::new(len)?;
            out.upload(&message(me, right, len, round))?;
            let inp = recv_buf(len)?;
            let mut g = comm.group_start();
            // SAFETY: live stream and buffers, synchronized below.
            unsafe {
                g.send_on(out.ptr, len, right, s).map_err(e2s)?;
                g.recv_on(inp.ptr, len, left, s).map_err(e2s)?;
            }
            g.group_end().map_err(e2s)?;
            sync(&stream)?;
            comm.device_error().map_err(e2s)?;
            check(&inp, left, me, len, round, "ring")?;
            msgs += 1;

            // The ring again, receives on a second stream: one plugin launch
            // on the first op's stream, the other joined before and after.
            let inp = recv_buf(len)?;
            let mut g = comm.group_start();
            // SAFETY: live streams and buffers, synchronized below.
            unsafe {
                g.send_on(out.ptr, len, right, s).map_err(e2s)?;
                g.recv_on(inp.ptr, len, left, stream2.raw()).map_err(e2s)?;
            }
            g.group_end().map_err(e2s)?;
            sync(&stream2)?;
            sync(&stream)?;
            comm.device_error().map_err(e2s)?;
            check(&inp, left, me, len, round, "ring on two streams")?;
            msgs += 1;

            // Pairs, not grouped, posted in opposite orders.
            if n % 2 == 0 {
                let partner = me ^ 1;
                let out = DevMem::new(len)?;
                out.upload(&message(me, partner, len, round + 10))?;
                let inp = recv_buf(len)?;
                // SAFETY: as above.
                unsafe {
                    if me % 2 == 0 {
                        comm.send_on(out.ptr, len, partner, s).map_err(e2s)?;
                        comm.recv_on(inp.ptr, len, partner, s).map_err(e2s)?;
                    } else {
                        comm.recv_on(inp.ptr, len, partner, s).map_err(e2s)?;
                        comm.send_on(out.ptr, len, partner, s).map_err(e2s)?;
                    }
                }
                sync(&stream)?;
                comm.device_error().map_err(e2s)?;
                check(&inp, partner, me, len, round + 10, "pair")?;
                msgs += 1;
            }

            // All to all with the rank's own block (a send to itself and its
            // receive, as NCCL programs post it; ce copies it in its kernel),
            // two messages each way to the ring neighbours, and a second
            // message to itself.
            let outs: Vec<DevMem> = (0..n)
                .map(|_| DevMem::new(len.max(1)))
                .collect::<Result<_, _>>()?;
            let ins: Vec<DevMem> = (0..n).map(|_| recv_buf(len)).collect::<Result<_, _>>()?;
            let extra_out = DevMem::new(len / 2 + 1)?;
            let extra_in = recv_buf(len / 2 + 1)?;
            extra_out.upload(&message(me, right, len / 2 + 1, round + 20))?;
            let self_out = DevMem::new(len / 2 + 1)?;
            let self_in = recv_buf(len / 2 + 1)?;
            self_out.upload(&message(me, me, len / 2 + 1, round + 40))?;
            let mut g = comm.group_start();
            for p in 0..n {
                outs[p].upload(&message(me, p, len, round + 30))?;
                // SAFETY: as above.
                unsafe {
                    g.recv_on(ins[p].ptr, len, p, s).map_err(e2s)?;
                    g.send_on(outs[p].ptr, len, p, s).map_err(e2s)?;
                }
            }
            // SAFETY: as above.
            unsafe {
                g.send_on(extra_out.ptr, len / 2 + 1, right, s)
                    .map_err(e2s)?;
                g.recv_on(self_in.ptr, len / 2 + 1, me, s).map_err(e2s)?;
                g.recv_on(extra_in.ptr, len / 2 + 1, left, s).map_err(e2s)?;
                g.send_on(self_out.ptr, len / 2 + 1, me, s).map_err(e2s)?;
            }
            g.group_end().map_err(e2s)?;
            sync(&stream)?;
            comm.device_error().map_err(e2s)?;
            for (p, inp) in ins.iter().enumerate() {
                check(inp, p, me, len, round + 30, "all-to-all")?;
                msgs += 1;
            }
            check(
                &self_in,
                me,
                me,
                len / 2 + 1,
                round + 40,
                "second message to itself",
            )?;
            msgs += 1;
            check(
                &extra_in,
                left,
                me,
                len / 2 + 1,
                round + 20,
                "second message",
            )?;
            msgs += 1;
        }
    }
    // A send to itself without its receive: refused before anything is
    // queued, the communicator still usable.
    let lone = DevMem::new(64)?;
    let mut g = comm.group_start();
    // SAFETY: as above (nothing is queued).
    unsafe { g.send_on(lone.ptr, 64, me, s).map_err(e2s)? };
    match g.group_end() {
        Err(e)
            if e.to_string()
                .contains("a send to itself needs its receive in the same group") => {}
        other => return Err(format!("a lone send to itself: {other:?}")),
    }
    // A send to itself and its receive on two streams: refused before
    // anything is queued, whoever would have run them.
    let lone_in = DevMem::new(64)?;
    let mut g = comm.group_start();
    // SAFETY: as above (nothing is queued).
    unsafe {
        g.send_on(lone.ptr, 64, me, s).map_err(e2s)?;
        g.recv_on(lone_in.ptr, 64, me, stream2.raw()).map_err(e2s)?;
    }
    match g.group_end() {
        Err(e) if e.to_string().contains("must be on one stream") => {}
        other => return Err(format!("a send to itself on two streams: {other:?}")),
    }
    comm.barrier().map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok(format!("rank {me}: {msgs} device messages checked"))
}

/// `p2p-size-mismatch [--sizes SENT,RECEIVED]`: rank 0 sends SENT bytes
/// (4096) to rank 1, which receives RECEIVED (8192). Both must fail with
/// `Error::Mismatch` naming the other (rank 0's send finished into the ring;
/// rank 1's kernel tells it), whichever format each size takes.
pub fn size_mismatch(sizes: &[usize]) -> Result<String, String> {
    let [sent, received] = *sizes else {
        return Err(format!("--sizes takes two sizes, not {sizes:?}"));
    };
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let buf = DevMem::new(sent.max(received))?;
    // SAFETY: live stream and buffer, synchronized below.
    unsafe {
        match me {
            0 => comm.send_on(buf.ptr, sent, 1, stream.raw()),
            1 => comm.recv_on(buf.ptr, received, 0, stream.raw()),
            _ => Ok(()),
        }
    }
    .map_err(e2s)?;
    sync(&stream)?;
    let t = std::time::Instant::now();
    let r = loop {
        let r = comm.device_error();
        if r.is_err() || me > 1 || t.elapsed().as_secs() > 30 {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    match (me, r) {
        (0 | 1, Err(e @ ferrocx::Error::Mismatch { .. })) => Ok(format!("MISMATCH {e}")),
        (0 | 1, r) => Err(format!("rank {me} expected Error::Mismatch, got {r:?}")),
        (_, _) => Ok(format!("rank {me}: sent")),
    }
}
