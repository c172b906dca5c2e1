//! `fxperf <collective>`: nccl-tests' sizes, bandwidths, placements and checks.

use super::args::{sizes, PerfArgs};
use super::data::{poison, vcounts, Case};
use super::device::DevBufs;
use super::table::{Row, Timing};
use super::timing::{sum_over_ranks, time_calls};
use ferrocx::{CollKind, CollSpec, Communicator, DataType, Error, RedOp, Result};

/// A zeroed byte buffer whose usable part starts on a 64-byte boundary (so it
/// is aligned for every element type, without `unsafe`).
pub struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` usable bytes.
    pub fn new(len: usize) -> Self {
        let v = vec![0u8; len + 64];
        let off = v.as_ptr().align_offset(64);
        AlignedBuf {
            off: if off < 64 { off } else { 0 },
            v,
            len,
        }
    }
    /// The usable bytes.
    pub fn get(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    /// The usable bytes, writable.
    pub fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// Elements of a collective at one nccl-tests size: `count` is the argument,
/// `send`/`recv` the full buffers (as on the root of rooted collectives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// NCCL's count.
    pub count: usize,
    /// Send buffer elements.
    pub send: usize,
    /// Receive buffer elements.
    pub recv: usize,
}

/// nccl-tests' derivation of the count from a size in bytes.
pub fn shape(kind: CollKind, size: usize, es: usize, nranks: usize) -> Shape {
    let c = size / es;
    let n = nranks.max(1);
    // Per-rank blocks are whole multiples of 16 bytes, as in nccl-tests.
    let base = (c / n) & !(16 / es - 1);
    let (count, send, recv) = match kind {
        CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => (c, c, c),
        CollKind::AllGather | CollKind::Gather => (base, base, base * n),
        CollKind::ReduceScatter | CollKind::Scatter => (base, base * n, base),
        CollKind::AllToAll | CollKind::AllToAllV => (base, base * n, base * n),
        CollKind::Barrier => (0, 0, 0),
    };
    Shape { count, send, recv }
}

/// (algbw, busbw) in GB/s for `count` elements of `es` bytes in `time_us`.
pub fn bandwidth(
    kind: CollKind,
    count: usize,
    es: usize,
    nranks: usize,
    time_us: f64,
) -> (f64, f64) {
    let n = nranks.max(1) as f64;
    let (mult, factor) = match kind {
        CollKind::AllReduce => (1.0, 2.0 * (n - 1.0) / n),
        CollKind::Broadcast | CollKind::Reduce => (1.0, 1.0),
        CollKind::Barrier => (0.0, 0.0),
        _ => (n, (n - 1.0) / n),
    };
    if time_us <= 0.0 {
        return (0.0, 0.0);
    }
    let algbw = count as f64 * es as f64 * mult / (time_us * 1e3);
    (algbw, algbw * factor)
}

/// One rank's buffers for a call: elements of send and receive, and for
/// in-place calls where the input starts and the output ends up in the one buffer.
#[derive(Debug, Clone, Copy)]
struct Layout {
    send: usize,
    recv: usize,
    in_off: usize,
    out_off: usize,
}

fn layout(kind: CollKind, count: usize, n: usize, rank: usize, root: usize) -> Result<Layout> {
    let (send, recv) = if kind == CollKind::AllToAllV {
        (n * count, n * count)
    } else {
        kind.buffer_elems(count, n, rank, root)
            .ok_or_else(|| Error::InvalidArgument(format!("{}: count overflows", kind.name())))?
    };
    let (in_off, out_off) = match kind {
        CollKind::AllGather => (rank * count, 0),
        CollKind::Gather if rank == root => (rank * count, 0),
        CollKind::ReduceScatter => (0, rank * count),
        CollKind::Scatter if rank == root => (0, rank * count),
        _ => (0, 0),
    };
    Ok(Layout {
        send,
        recv,
        in_off,
        out_off,
    })
}

struct Bufs {
    send: AlignedBuf,
    recv: AlignedBuf,
    /// `--mem cuda`: the device mirrors the calls use.
    dev: Option<DevBufs>,
}

impl Bufs {
    fn sync(&self) -> Result<()> {
        self.dev.as_ref().map_or(Ok(()), DevBufs::sync)
    }

    /// Copy the host send bytes and receive bytes to the device mirrors.
    fn upload(&self, sb: usize, rb: usize) -> Result<()> {
        if let Some(d) = &self.dev {
            d.send.upload(&self.send.get()[..sb])?;
            d.recv.upload(&self.recv.get()[..rb])?;
        }
        Ok(())
    }

    /// Copy the device receive bytes back (after a synchronized call).
    fn download(&mut self, rb: usize) -> Result<()> {
        if let Some(d) = &self.dev {
            d.recv.download(&mut self.recv.get_mut()[..rb])?;
        }
        Ok(())
    }
}

/// One call: on the host buffers, or queued on the device mirrors' stream.
fn call_once(
    comm: &Communicator,
    spec: &CollSpec,
    bufs: &mut Bufs,
    (sb, rb): (usize, usize),
    in_place: bool,
) -> Result<()> {
    match &bufs.dev {
        // SAFETY: the stream and buffers belong to `bufs`, which outlives the
        // synchronization that ends every timing and check.
        Some(d) => unsafe {
            if in_place {
                comm.collective_in_place_on(spec, d.recv.ptr, d.stream.raw())
            } else {
                comm.collective_on(spec, d.send.ptr, d.recv.ptr, d.stream.raw())
            }
        },
        None if in_place => comm.collective_in_place(spec, &mut bufs.recv.get_mut()[..rb]),
        None => {
            let (send, recv) = (&bufs.send, &mut bufs.recv);
            comm.collective(spec, &send.get()[..sb], &mut recv.get_mut()[..rb])
        }
    }
}

/// One row: out-of-place then in-place, each timed and (with -c 1) checked.
#[allow(clippy::too_many_arguments)]
fn measure(
    comm: &Communicator,
    a: &PerfArgs,
    bufs: &mut Bufs,
    kind: CollKind,
    dtype: DataType,
    op: RedOp,
    root: usize,
    size: usize,
    seed: u64,
) -> Result<Row> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let es = dtype.size();
    let sh = shape(kind, size, es, n);
    let mut spec = CollSpec::new(kind, dtype, sh.count).op(op).root(root);
    if kind == CollKind::AllToAllV {
        spec = spec.with_v(vcounts(rank, n, sh.count));
    }
    let lay = layout(kind, sh.count, n, rank, root)?;
    let case = Case {
        kind,
        dtype,
        op,
        count: sh.count,
        root,
        rank,
        nranks: n,
    };
    let (sb, rb) = (lay.send * es, lay.recv * es);
    let timing = |time_us: f64, wrong: Option<u64>| {
        let (algbw, busbw) = bandwidth(kind, sh.count, es, n, time_us);
        Timing {
            time_us,
            algbw,
            busbw,
            wrong,
        }
    };

    // Out-of-place.
    let prepare_oop = |bufs: &mut Bufs, s: u64| -> Result<()> {
        case.fill_input(s, &mut bufs.send.get_mut()[..sb]);
        bufs.recv.get_mut()[..rb].fill(poison(s));
        bufs.upload(sb, rb)
    };
    prepare_oop(bufs, seed)?;
    let t = {
        let b = std::cell::RefCell::new(&mut *bufs);
        time_calls(
            comm,
            a,
            || call_once(comm, &spec, &mut b.borrow_mut(), (sb, rb), false),
            || b.borrow().sync(),
        )?
    };
    let wrong = if a.check {
        prepare_oop(bufs, seed + 1)?;
        call_once(comm, &spec, bufs, (sb, rb), false)?;
        bufs.sync()?;
        bufs.download(rb)?;
        let local = case.check_output(seed + 1, &bufs.recv.get()[..rb]);
        Some(sum_over_ranks(comm, local)?)
    } else {
        None
    };
    let oop = timing(t, wrong);

    // In-place: one buffer of max(send, recv) elements, NCCL's layout.
    let whole = lay.send.max(lay.recv) * es;
    let (ib, ob) = (lay.in_off * es, lay.out_off * es);
    let prepare_ip = |bufs: &mut Bufs, s: u64| -> Result<()> {
        let buf = &mut bufs.recv.get_mut()[..whole];
        buf.fill(poison(s));
        case.fill_input(s, &mut buf[ib..ib + sb]);
        bufs.upload(0, whole)
    };
    prepare_ip(bufs, seed + 2)?;
    let t = {
        let b = std::cell::RefCell::new(&mut *bufs);
        time_calls(
            comm,
            a,
            || call_once(comm, &spec, &mut b.borrow_mut(), (whole, whole), true),
            || b.borrow().sync(),
        )?
    };
    let wrong = if a.check {
        prepare_ip(bufs, seed + 3)?;
        call_once(comm, &spec, bufs, (whole, whole), true)?;
        bufs.sync()?;
        bufs.download(whole)?;
        let local = case.check_output(seed + 3, &bufs.recv.get()[ob..ob + rb]);
        Some(sum_over_ranks(comm, local)?)
    } else {
        None
    };
    let ip = timing(t, wrong);

    Ok(Row {
        size: sh.send.max(sh.recv) * es,
        count: sh.count,
        dtype: dtype.name(),
        redop: if kind.reduces() { op.name() } else { "none" },
        root: if kind.rooted() { root as i64 } else { -1 },
        oop,
        ip: Some(ip),
    })
}

/// Run the sweep for `kind`; `emit` receives each finished row (rank 0 prints).
pub fn run(
    comm: &Communicator,
    a: &PerfArgs,
    kind: CollKind,
    mut emit: impl FnMut(&Row),
) -> Result<Vec<Row>> {
    let n = comm.nranks();
    let roots: Vec<usize> = match (kind.rooted(), a.root) {
        (false, _) => vec![0],
        (true, None) => (0..n).collect(),
        (true, Some(r)) if r < n => vec![r],
        (true, Some(r)) => {
            return Err(Error::InvalidArgument(format!(
                "-r {r}: root out of range, the communicator has {n} ranks (0..={})",
                n - 1
            )))
        }
    };
    let ops: Vec<RedOp> = if kind.reduces() {
        a.redops.clone()
    } else {
        vec![RedOp::Sum]
    };
    // Every size's buffers fit in -e bytes (nccl-tests' size is the larger buffer).
    let cap = a.max_bytes.max(1);
    let mut bufs = Bufs {
        send: AlignedBuf::new(cap),
        recv: AlignedBuf::new(cap),
        dev: if a.cuda {
            Some(DevBufs::new(comm, cap)?)
        } else {
            None
        },
    };
    let regs = match (&bufs.dev, a.register > 0) {
        (_, false) => None,
        // SAFETY: the device buffers live until after the deregistration below.
        (Some(d), true) => unsafe {
            Some((
                comm.register_device(d.send.ptr, cap)?,
                comm.register_device(d.recv.ptr, cap)?,
            ))
        },
        (None, true) => Some((
            comm.register(bufs.send.get())?,
            comm.register(bufs.recv.get())?,
        )),
    };
    let (sp, rp) = match &bufs.dev {
        Some(d) => (d.send.ptr, d.recv.ptr),
        None => (
            bufs.send.get().as_ptr() as u64,
            bufs.recv.get().as_ptr() as u64,
        ),
    };
    let windows = if a.register >= 2 {
        Some(match &bufs.dev {
            // SAFETY: the device buffers live until after the deregistration below.
            Some(d) => unsafe {
                (
                    comm.window_register_device(d.send.ptr, cap)?,
                    comm.window_register_device(d.recv.ptr, cap)?,
                )
            },
            None => (
                comm.window_register(bufs.send.get_mut())?,
                comm.window_register(bufs.recv.get_mut())?,
            ),
        })
    } else {
        None
    };
    let mut runners: Vec<(usize, String)> = Vec::new();
    let mut rows = Vec::new();
    let mut seed = 1u64;
    for &dtype in &a.dtypes {
        for &op in &ops {
            for &root in &roots {
                for size in sizes(a) {
                    let count = shape(kind, size, dtype.size(), n).count;
                    let spec = CollSpec::new(kind, dtype, count).op(op).root(root);
                    if let Ok(c) = comm.collective_choice(&spec, sp, rp, false, a.cuda) {
                        runners.push((size, c.winner().to_string()));
                    }
                    let row = measure(comm, a, &mut bufs, kind, dtype, op, root, size, seed)?;
                    seed += 4;
                    emit(&row);
                    rows.push(row);
                }
            }
        }
    }
    if let Some((s, r)) = windows {
        comm.window_deregister(s)?;
        comm.window_deregister(r)?;
    }
    if let Some((s, r)) = regs {
        comm.deregister(s)?;
        comm.deregister(r)?;
    }
    if comm.rank() == 0 && !comm.collective_plugins().is_empty() {
        runners.dedup_by(|b, a| a.1 == b.1);
        let list: Vec<String> = runners
            .iter()
            .map(|(s, w)| format!("{w} from {s} B"))
            .collect();
        println!("# ran on: {}", list.join(", "));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_counts() {
        // all_reduce: count = size / eltsize.
        assert_eq!(
            shape(CollKind::AllReduce, 1024, 4, 3),
            Shape {
                count: 256,
                send: 256,
                recv: 256
            }
        );
        // all_gather at 8 B on 2 ranks: (2/2) floats rounded down to 16 B -> 0.
        assert_eq!(shape(CollKind::AllGather, 8, 4, 2).count, 0);
        let s = shape(CollKind::AllGather, 1 << 20, 4, 3);
        assert_eq!((s.count, s.send, s.recv), (87380, 87380, 262140));
        let s = shape(CollKind::ReduceScatter, 1 << 20, 8, 4);
        assert_eq!((s.count, s.send, s.recv), (32768, 131072, 32768));
        let s = shape(CollKind::AllToAll, 4096, 1, 3);
        assert_eq!((s.count, s.send, s.recv), (1360, 4080, 4080));
        let s = shape(CollKind::Scatter, 4096, 2, 2);
        assert_eq!((s.count, s.send, s.recv), (1024, 2048, 1024));
    }

    #[test]
    fn bus_factors() {
        let bw = |k| bandwidth(k, 1000, 1, 4, 1.0);
        assert_eq!(bw(CollKind::AllReduce), (1.0, 1.5));
        assert_eq!(bw(CollKind::AllGather), (4.0, 3.0));
        assert_eq!(bw(CollKind::ReduceScatter), (4.0, 3.0));
        assert_eq!(bw(CollKind::AllToAll), (4.0, 3.0));
        assert_eq!(bw(CollKind::Gather), (4.0, 3.0));
        assert_eq!(bw(CollKind::Broadcast), (1.0, 1.0));
        assert_eq!(bw(CollKind::Reduce), (1.0, 1.0));
    }

    #[test]
    fn aligned() {
        let mut b = AlignedBuf::new(100);
        assert_eq!(b.get().as_ptr() as usize % 64, 0);
        assert_eq!(b.get_mut().len(), 100);
    }
}
