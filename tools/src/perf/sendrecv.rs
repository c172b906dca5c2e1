//! `fxperf sendrecv`: every rank sends to rank+1 and receives from rank-1 in one group.

use super::args::{sizes, PerfArgs};
use super::device::DevBufs;
use super::table::{Row, Timing};
use super::timing::{sum_over_ranks, time_calls};
use ferrocx::{Communicator, Result};

/// Byte expected at `i` of the buffer sent by `rank` in round `round`.
fn pattern(rank: usize, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ rank.wrapping_mul(131) ^ round.wrapping_mul(7) ^ (i >> 8)) as u8
}

/// Run the benchmark; `emit` receives each finished row (rank 0 prints).
pub fn run(comm: &Communicator, a: &PerfArgs, mut emit: impl FnMut(&Row)) -> Result<Vec<Row>> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let right = (rank + 1) % n;
    let left = (rank + n - 1) % n;
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
        for (i, b) in sbuf[..size].iter_mut().enumerate() {
            *b = pattern(rank, round, i);
        }
        if let Some(d) = &dev {
            d.send.upload(&sbuf[..size])?;
        }
        let step = |sbuf: &[u8], rbuf: &mut [u8]| -> Result<()> {
            let mut g = comm.group_start();
            match &dev {
                // SAFETY: the stream and buffers live until the end of the run, after
                // every synchronization.
                Some(d) => unsafe {
                    g.send_on(d.send.ptr, size, right, d.stream.raw())?;
                    g.recv_on(d.recv.ptr, size, left, d.stream.raw())?;
                },
                None => {
                    g.send(&sbuf[..size], right)?;
                    g.recv(&mut rbuf[..size], left)?;
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
            let local = rbuf[..size]
                .iter()
                .enumerate()
                .filter(|(i, &b)| b != pattern(left, round, *i))
                .count() as u64;
            Some(sum_over_ranks(comm, local)?)
        } else {
            None
        };
        let algbw = size as f64 / time_us / 1e3;
        let row = Row {
            size,
            count: size,
            dtype: "uint8",
            redop: "none",
            root: -1,
            oop: Timing {
                time_us,
                algbw,
                busbw: algbw,
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
