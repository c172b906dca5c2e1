//! `fxperf sendrecv`: every rank sends to rank+1 and receives from rank-1 in
//! one group; `fxperf alltoall_sends`: every rank sends a block to every rank
//! (itself included) and receives one from each, in one group.

use super::args::{sizes, PerfArgs};
use super::device::DevBufs;
use super::table::{Row, Timing};
use super::timing::{sum_over_ranks, time_calls};
use ferrocx::{Communicator, Result};

/// Byte expected at `i` of the buffer sent by `rank` in round `round`.
fn pattern(rank: usize, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ rank.wrapping_mul(131) ^ round.wrapping_mul(7) ^ (i >> 8)) as u8
}

/// The messages of one row: (peer, offset in the send buffer, offset in the
/// receive buffer, bytes) for the sends, and the same for the receives.
type Messages = Vec<(usize, usize, usize, usize)>;

/// What rank `rank` of `n` sends and receives for a row of `size` bytes:
/// sendrecv one message each way with its neighbours, alltoall_sends a block
/// of `size / n` (down to 16 bytes) with every rank.
fn messages(all: bool, rank: usize, n: usize, size: usize) -> (Messages, Messages) {
    if !all {
        let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
        return (vec![(right, 0, 0, size)], vec![(left, 0, 0, size)]);
    }
    let per = size / n / 16 * 16;
    let sends = (0..n).map(|p| (p, p * per, 0, per)).collect();
    let recvs = (0..n).map(|p| (p, 0, p * per, per)).collect();
    (sends, recvs)
}

/// Run the benchmark (`all`: alltoall_sends); `emit` receives each finished
/// row (rank 0 prints).
pub fn run(
    comm: &Communicator,
    a: &PerfArgs,
    all: bool,
    mut emit: impl FnMut(&Row),
) -> Result<Vec<Row>> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let max = a.max_bytes;
    let sbuf = vec![0u8; max.max(1)];
    let mut rbuf = vec![0u8; max.max(1)];
    let dev = if a.cuda {
        Some(DevBufs::new(comm, max.max(1))?)
    } else {
        None
    };
    let regs = match (&dev, a.register > 0) {
        (_, false) => None,
        // SAFETY: the device buffers live until after the deregistration below.
        (Some(d), true) => unsafe {
            Some((
                comm.register_device(d.send.ptr, max.max(1))?,
                comm.register_device(d.recv.ptr, max.max(1))?,
            ))
        },
        (None, true) => Some((comm.register(&sbuf)?, comm.register(&rbuf)?)),
    };
    let mut rows = Vec::new();
    let mut sbuf = sbuf;
    for (round, size) in sizes(a).into_iter().enumerate() {
        let (sends, recvs) = messages(all, rank, n, size);
        let size = if all { sends[0].3 * n } else { size };
        for (i, b) in sbuf[..size].iter_mut().enumerate() {
            *b = pattern(rank, round, i);
        }
        if let Some(d) = &dev {
            d.send.upload(&sbuf[..size])?;
        }
        let step = |sbuf: &[u8], rbuf: &mut [u8]| -> Result<()> {
            // Host memory, one send and one receive: `sendrecv`, the call a
            // program makes (Open MPI's benchmark calls MPI_Sendrecv); it runs
            // as the group below would.
            if let (None, [(peer, at, _, len)], [(from, _, _, rlen)]) =
                (&dev, &sends[..], &recvs[..])
            {
                return comm.sendrecv(&sbuf[*at..at + len], *peer, &mut rbuf[..*rlen], *from);
            }
            // The sends, then the receives: one group, so the order within it
            // does not matter (ce runs it as one kernel either way).
            let mut g = comm.group_start();
            match &dev {
                // SAFETY: the stream and buffers live until the end of the run, after
                // every synchronization; every message lies within them.
                Some(d) => unsafe {
                    for &(peer, at, _, len) in &sends {
                        g.send_on(d.send.ptr + at as u64, len, peer, d.stream.raw())?;
                    }
                    for &(from, _, to, len) in &recvs {
                        g.recv_on(d.recv.ptr + to as u64, len, from, d.stream.raw())?;
                    }
                },
                None => {
                    for &(peer, at, _, len) in &sends {
                        g.send(&sbuf[at..at + len], peer)?;
                    }
                    // The receive blocks lie one after another from 0: borrowed
                    // apart without allocating (a call's cost is timed).
                    let mut rest: &mut [u8] = rbuf;
                    for &(from, _, _, len) in &recvs {
                        let (part, tail) = std::mem::take(&mut rest).split_at_mut(len);
                        g.recv(part, from)?;
                        rest = tail;
                    }
                }
            }
            g.group_end()
        };
        let sync = || dev.as_ref().map_or(Ok(()), DevBufs::sync);
        let time_us = {
            let r = std::cell::RefCell::new(&mut rbuf);
            time_calls(comm, a, || step(&sbuf, &mut r.borrow_mut()[..]), sync)?
        };
        let wrong = if a.check {
            rbuf[..size].fill(0);
            if let Some(d) = &dev {
                d.recv.upload(&rbuf[..size])?;
            }
            step(&sbuf, &mut rbuf)?;
            sync()?;
            if let Some(d) = &dev {
                d.recv.download(&mut rbuf[..size])?;
            }
            // Sender `from` sent its bytes from `at` (its own send offset for us).
            let mut local = 0u64;
            for &(from, _, to, len) in &recvs {
                let at = if all { rank * len } else { 0 };
                local += rbuf[to..to + len]
                    .iter()
                    .enumerate()
                    .filter(|(i, &b)| b != pattern(from, round, at + *i))
                    .count() as u64;
            }
            Some(sum_over_ranks(comm, local)?)
        } else {
            None
        };
        let algbw = size as f64 / time_us / 1e3;
        // An all-to-all's busbw: (n − 1) / n of algbw, as nccl-tests'.
        let busbw = if all {
            algbw * (n - 1) as f64 / n as f64
        } else {
            algbw
        };
        let row = Row {
            size,
            count: size,
            dtype: "uint8",
            redop: "none",
            root: -1,
            oop: Timing {
                time_us,
                algbw,
                busbw,
                wrong,
            },
            ip: None,
        };
        emit(&row);
        rows.push(row);
    }
    if let Some((s, r)) = regs {
        comm.deregister(s)?;
        comm.deregister(r)?;
    }
    Ok(rows)
}
