//! Turning the abstract steps into work on the user's stream.
//!
//! * Barrier operations ([`MemOp`]) become `cuStreamBatchMemOp_v2` calls of
//!   at most [`MAX_MEMOPS`] operations each (the driver wants fewer than
//!   256 per call), in order: `CU_STREAM_MEM_OP_WRITE_VALUE_32` with
//!   `CU_STREAM_WRITE_VALUE_DEFAULT` (the write is ordered after the
//!   stream's earlier work, copies included, with a memory barrier), and
//!   `CU_STREAM_MEM_OP_WAIT_VALUE_32` with `CU_STREAM_WAIT_VALUE_GEQ` or
//!   `_EQ`; flags of the call: 0.
//! * A batch of copies becomes one `cuMemcpyBatchAsync` (driver ≥ 12.8, not
//!   while capturing — the driver has no graph node for it — and not on the
//!   legacy default stream, which it refuses) with one attribute for all:
//!   `srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`, `flags =
//!   CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, no location hints; or else
//!   one `cuMemcpyAsync` per copy (unified addressing: the IPC-mapped peer
//!   addresses are device pointers of this context).
//! * A batch with both this rank's local copies (its own block) and copies
//!   to or from peers, with at least [`BESIDE_MIN_BYTES`] local and not
//!   while capturing, runs the local ones on a second stream ([`Side`]),
//!   forked from and joined back into the user's stream by two events:
//!   copies queued on one stream run one after the other, so a gather
//!   root's own block otherwise waited for its peers' (2 × H200, 128 MiB:
//!   235 µs against 192 in place).
//! * A reduction ([`crate::plan::Fold`]) becomes the SDK's reduction kernels
//!   (`ferrocx_sdk::kernels`), which read the peers' inputs straight through
//!   their IPC mappings: `dst = s0 op s1`, then `dst = dst op sₖ` for each
//!   further source, then avg's division; a single source is a copy.

use crate::driver::Api;
use crate::flags::Flags;
use crate::plan::Fold;
use crate::sync::{Cmp, MemOp};
use ferrocx_sdk::cuda::{check, name, sys, Event, Stream};
use ferrocx_sdk::kernels::graph_wait::GraphWaitArgs;
use ferrocx_sdk::kernels::{self, ll, DataType, Kernels, RedOp};
use ferrocx_sdk::{PluginError, PluginResult};

/// Operations per `cuStreamBatchMemOp` call ("must be less than 256").
pub const MAX_MEMOPS: usize = 255;

/// Local bytes from which a batch's local copies run on the [`Side`]
/// stream (two event records and two waits: a few µs of host time).
pub const BESIDE_MIN_BYTES: usize = 1 << 20;

/// A second stream of the communicator's context, for a batch's local
/// copies beside its peer copies, and the two events that fork it from the
/// user's stream and join it back.
pub struct Side {
    stream: Stream,
    fork: Event,
    join: Event,
}

impl Side {
    /// On the bound context.
    pub fn new() -> PluginResult<Self> {
        Ok(Side {
            stream: Stream::new()?,
            fork: Event::new()?,
            join: Event::new()?,
        })
    }

    /// Its stream (ce's own, never captured).
    pub fn stream(&self) -> sys::CUstream {
        self.stream.raw()
    }
}

/// Whether a batch's `local` copies go on the [`Side`] stream beside its
/// `remote` ones.
pub fn beside(local: &[Xfer], remote: &[Xfer], capturing: bool) -> bool {
    !capturing
        && !remote.is_empty()
        && local.iter().map(|x| x.bytes).sum::<usize>() >= BESIDE_MIN_BYTES
}

/// `remote` on `stream` and `local` on `side`'s stream, which starts after
/// `stream`'s work so far and which `stream` waits for after `remote`. Once
/// the side stream took work, it is joined back (or, where the join cannot
/// be queued, waited for) whatever fails after: nothing it queued outlives
/// the call's tracked event.
///
/// # Safety
/// As [`copies`], for both lists; `side` is of `stream`'s context.
pub unsafe fn copies_beside(
    api: &Api,
    stream: sys::CUstream,
    side: &Side,
    local: &[Xfer],
    remote: &[Xfer],
    batch: bool,
) -> PluginResult<()> {
    // SAFETY: the caller's contract for `stream`; the side's stream and
    // events are live and of the same context.
    unsafe {
        side.fork.record(stream)?;
        check(
            sys::cuStreamWaitEvent(side.stream.raw(), side.fork.raw(), 0),
            "cuStreamWaitEvent (ce's side stream)",
        )?;
        let mine = copies(api, side.stream.raw(), local, batch);
        let peers = match &mine {
            Ok(()) => copies(api, stream, remote, batch),
            Err(_) => Ok(()),
        };
        let joined = side.join.record_on(&side.stream).and_then(|()| {
            check(
                sys::cuStreamWaitEvent(stream, side.join.raw(), 0),
                "cuStreamWaitEvent (joining ce's side stream)",
            )
        });
        if joined.is_err() {
            // Bounded: the side stream holds local copies alone.
            let _ = check(
                sys::cuStreamSynchronize(side.stream.raw()),
                "cuStreamSynchronize (ce's side stream)",
            );
        }
        mine.and(peers).and(joined)
    }
}

/// One resolved copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xfer {
    /// Destination (this process's address of it).
    pub dst: u64,
    /// Source.
    pub src: u64,
    /// Bytes.
    pub bytes: usize,
}

fn param(op: &MemOp, flags: &Flags) -> sys::CUstreamBatchMemOpParams {
    // SAFETY: the parameter union is plain data; all zeros is a valid value
    // (reserved fields and `alias` must be 0).
    let mut p: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
    // A flag write and a note write differ only in where they land.
    let write = |p: &mut sys::CUstreamBatchMemOpParams, address, value| {
        p.writeValue.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
        p.writeValue.address = address;
        p.writeValue.__bindgen_anon_1.value = value;
        p.writeValue.flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
    };
    match *op {
        MemOp::Write {
            rank,
            array,
            slot,
            value,
        } => write(&mut p, flags.addr(rank, array, slot), value),
        MemOp::Note {
            rank,
            seq,
            word,
            value,
        } => write(&mut p, flags.note_addr(rank, seq, word), value),
        MemOp::Wait {
            array,
            slot,
            value,
            cmp,
        } => {
            p.waitValue.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
            p.waitValue.address = flags.addr(flags.rank(), array, slot);
            p.waitValue.__bindgen_anon_1.value = value;
            p.waitValue.flags = match cmp {
                Cmp::Geq => sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ,
                Cmp::Eq => sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ,
            } as u32;
        }
    }
    p
}

/// Where a barrier's `EQ` waits run as the SDK's graph barrier wait
/// (`kernels::graph_wait`: polled with a deadline and the abort word)
/// instead of stream waits: on a stream being captured, whose replays
/// nothing on the host could release.
pub struct GraphWaits<'a> {
    /// The kernels (their `u8` sum module holds the wait).
    pub kernels: &'a Kernels,
    /// This rank's LL control words (abort, error).
    pub ctl: u64,
    /// `FERROCX_TIMEOUT`.
    pub timeout_ns: u64,
}

/// Queue `ops` on `stream`, in order; with `graph`, each run of `EQ` waits
/// (a graph-mode barrier's) as one graph barrier wait kernel.
///
/// # Safety
/// `stream` is a live stream (or null) of the bound context, the one the
/// flag buffers are open in; `graph`'s control words are this rank's.
pub unsafe fn memops(
    api: &Api,
    stream: sys::CUstream,
    flags: &Flags,
    ops: &[MemOp],
    graph: Option<&GraphWaits<'_>>,
) -> PluginResult<()> {
    let Some(g) = graph else {
        // SAFETY: the caller's contract.
        return unsafe { batch(api, stream, flags, ops) };
    };
    let kernel_wait = |op: &MemOp| matches!(op, MemOp::Wait { cmp: Cmp::Eq, .. });
    let mut rest = ops;
    while let Some(first) = rest.first() {
        let waits = kernel_wait(first);
        let run = rest
            .iter()
            .position(|o| kernel_wait(o) != waits)
            .unwrap_or(rest.len());
        let (now, later) = rest.split_at(run);
        rest = later;
        if !waits {
            // SAFETY: the caller's contract.
            unsafe { batch(api, stream, flags, now) }?;
            continue;
        }
        for part in now.chunks(ll::MAX_RANKS) {
            let mut a = GraphWaitArgs {
                ctl: g.ctl,
                timeout_ns: g.timeout_ns,
                n: 0,
                value: 0,
                addr: [0; ll::MAX_RANKS],
                peer: [0; ll::MAX_RANKS],
            };
            for op in part {
                let MemOp::Wait {
                    array, slot, value, ..
                } = *op
                else {
                    unreachable!("a run of waits")
                };
                // Every wait of a graph barrier awaits the same constant.
                if a.n > 0 && value != a.value {
                    return Err(PluginError::internal(
                        "a graph barrier's waits differ in value",
                    ));
                }
                let i = a.n as usize;
                a.addr[i] = flags.addr(flags.rank(), array, slot);
                a.peer[i] = slot as u32;
                a.value = value;
                a.n += 1;
            }
            // SAFETY: the words lie in this rank's flag buffer and the control
            // words in it too (mapped until comm_destroy); the stream per the caller.
            unsafe { g.kernels.graph_wait(&a, stream) }.map_err(kernel_error)?;
        }
    }
    Ok(())
}

/// `ops` as `cuStreamBatchMemOp` calls, in order.
///
/// # Safety
/// As [`memops`].
unsafe fn batch(
    api: &Api,
    stream: sys::CUstream,
    flags: &Flags,
    ops: &[MemOp],
) -> PluginResult<()> {
    let mut params: Vec<sys::CUstreamBatchMemOpParams> =
        ops.iter().map(|op| param(op, flags)).collect();
    for chunk in params.chunks_mut(MAX_MEMOPS) {
        // SAFETY: `chunk` holds chunk.len() (< 256) initialized parameters that live
        // across the call; every address lies in a flag buffer that stays mapped
        // until comm_destroy; flags 0 as required; the stream per the caller.
        let r = unsafe { (api.batch_memop)(stream, chunk.len() as u32, chunk.as_mut_ptr(), 0) };
        check(r, "cuStreamBatchMemOp (ce barrier)")?;
    }
    Ok(())
}

/// Queue `list` on `stream` (with `cuMemcpyBatchAsync` when `batch`).
///
/// # Safety
/// Every range is device memory of this process valid until the stream
/// passes the copy; `stream` as for [`memops`]; `batch` only where allowed
/// (driver ≥ 12.8, not capturing, not the legacy stream).
pub unsafe fn copies(
    api: &Api,
    stream: sys::CUstream,
    list: &[Xfer],
    batch: bool,
) -> PluginResult<()> {
    if list.is_empty() {
        return Ok(());
    }
    if let (true, Some(f)) = (batch && list.len() > 1, api.memcpy_batch) {
        let mut dsts: Vec<sys::CUdeviceptr> = list.iter().map(|x| x.dst).collect();
        let mut srcs: Vec<sys::CUdeviceptr> = list.iter().map(|x| x.src).collect();
        let mut sizes: Vec<usize> = list.iter().map(|x| x.bytes).collect();
        // SAFETY: plain data; zeroed location hints are CU_MEM_LOCATION_TYPE_INVALID
        // (no hint), which the driver accepts for device pointers.
        let mut attr: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
        attr.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        attr.flags = sys::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE as u32;
        let mut attr_idx = [0usize];
        let mut fail = usize::MAX;
        // SAFETY: three arrays of list.len() entries, one attribute applying from
        // copy 0 on (attrsIdxs[0] == 0 as required), a valid failIdx out pointer,
        // all alive across the call; ranges and stream per the caller's contract.
        let r = unsafe {
            f(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                list.len(),
                &mut attr,
                attr_idx.as_mut_ptr(),
                1,
                &mut fail,
                stream,
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            let at = list.get(fail).map_or(String::new(), |x| {
                format!(
                    " at copy {fail} ({} bytes {:#x} → {:#x})",
                    x.bytes, x.src, x.dst
                )
            });
            return Err(PluginError::system(format!(
                "cuMemcpyBatchAsync of {} copies failed{at}: {}",
                list.len(),
                name(r)
            )));
        }
        return Ok(());
    }
    for x in list {
        // SAFETY: the caller's contract: both ranges valid device memory of this
        // process (the destination possibly a peer's, IPC-mapped), the stream live.
        let r = unsafe { sys::cuMemcpyAsync(x.dst, x.src, x.bytes, stream) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(PluginError::system(format!(
                "cuMemcpyAsync of {} bytes {:#x} → {:#x} failed: {}",
                x.bytes,
                x.src,
                x.dst,
                name(r)
            )));
        }
    }
    Ok(())
}

pub fn kernel_error(e: kernels::Error) -> PluginError {
    match e {
        kernels::Error::Unsupported(m) => PluginError::unsupported(m),
        kernels::Error::InvalidArgument(m) => PluginError::invalid(m),
        kernels::Error::Cuda(m) => PluginError::system(m),
    }
}

/// Queue `f` on `stream`: this rank's receive buffer at `dst` becomes the
/// fold of `f.srcs` (resolved to the addresses `srcs`, in order).
///
/// # Safety
/// `dst` and every source are device memory of this process (peers'
/// IPC-mapped) valid for `f.bytes` until the stream passes the work; `dst`
/// equals a source exactly or overlaps none; `stream` as for [`memops`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn fold(
    k: &Kernels,
    (dtype, op, elem): (DataType, RedOp, usize),
    nranks: usize,
    f: &Fold,
    dst: u64,
    srcs: &[u64],
    stream: sys::CUstream,
    api: &Api,
) -> PluginResult<()> {
    let count = f.bytes / elem.max(1);
    let Some(&first) = srcs.first() else {
        return Ok(());
    };
    if srcs.len() == 1 {
        let x = Xfer {
            dst,
            src: first,
            bytes: f.bytes,
        };
        if x.src == x.dst {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        return unsafe { copies(api, stream, &[x], false) };
    }
    let mut a = first;
    for &s in &srcs[1..] {
        // SAFETY: the caller's contract: every range valid for `count` elements,
        // `dst` equal to a source or apart from all.
        unsafe { k.reduce(dtype, op, dst, a, s, count, stream) }.map_err(kernel_error)?;
        a = dst;
    }
    // SAFETY: as above.
    unsafe { k.finish(dtype, op, dst, count, nranks, stream) }.map_err(kernel_error)
}
