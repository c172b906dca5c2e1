//! Collectives, send/recv, registration and groups. A call checks its
//! arguments, tells host from device buffers by the pointer, and runs on the
//! communicator now — or, inside `ferrocx_group_start/end`, is queued on the
//! thread and run with the rest of the group.

use crate::comm::{comm_ref, rank_of, FerrocxComm};
use crate::status::guard;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, Error, RawStream, RedOp, Result};
use std::cell::RefCell;
use std::ffi::c_void;

fn dtype_of(raw: i32) -> Result<DataType> {
    DataType::ALL
        .into_iter()
        .find(|d| *d as i32 == raw)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown data type {raw} (FERROCX_INT8..FERROCX_FLOAT8E5M2)"
            ))
        })
}

fn op_of(raw: i32) -> Result<RedOp> {
    RedOp::ALL
        .into_iter()
        .find(|o| *o as i32 == raw)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown reduction operator {raw} (FERROCX_SUM..FERROCX_AVG)"
            ))
        })
}

fn root_of(raw: i32) -> Result<usize> {
    usize::try_from(raw).map_err(|_| Error::InvalidArgument(format!("root {raw} is negative")))
}

/// Whether the call's buffers are device memory (by the first non-null one,
/// unless the caller already asked the driver: `known`); host buffers take
/// no stream.
fn on_device(ptrs: &[usize], stream: *mut c_void, known: Option<bool>) -> Result<bool> {
    let dev = known.unwrap_or_else(|| {
        ptrs.iter()
            .find(|&&p| p != 0)
            .is_some_and(|&p| ferrocx_sdk::cuda::device_of(p).is_some())
    });
    if !dev && !stream.is_null() {
        return Err(Error::InvalidArgument(
            "the buffers are host memory but a stream was given (pass NULL: host calls complete before returning)".into(),
        ));
    }
    Ok(dev)
}

/// One queued call of a group.
enum Pending {
    Coll {
        spec: CollSpec,
        send: usize,
        recv: usize,
        in_place: bool,
        device: bool,
        stream: usize,
    },
    P2p {
        send: bool,
        ptr: usize,
        len: usize,
        peer: usize,
        device: bool,
        stream: usize,
    },
}

thread_local! {
    /// Open groups on this thread: their depth, and the calls queued per communicator.
    static GROUP: RefCell<(usize, Vec<(usize, Pending)>)> = const { RefCell::new((0, Vec::new())) };
}

fn in_group() -> bool {
    group_depth() > 0
}

/// How many `ferrocx_group_start` calls on this thread have no `ferrocx_group_end` yet.
pub fn group_depth() -> usize {
    GROUP.with(|g| g.borrow().0)
}

/// The buffer of `len` bytes at `p` as a slice (empty for null or 0).
///
/// # Safety
/// `p..p+len` readable (and writable for `_mut`) for the call (the C caller's contract).
unsafe fn slice<'a>(p: usize, len: usize) -> &'a [u8] {
    if p == 0 || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }
}

/// # Safety
/// As [`slice`], writable.
unsafe fn slice_mut<'a>(p: usize, len: usize) -> &'a mut [u8] {
    if p == 0 || len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) }
}

/// Bytes of (send, recv) this rank uses, from NCCL's layouts.
fn extents(c: &Communicator, spec: &CollSpec) -> Result<(usize, usize)> {
    let (se, re) = spec
        .kind
        .buffer_elems(spec.count, c.nranks(), c.rank(), spec.root)
        .ok_or_else(|| Error::InvalidArgument(format!("count {} overflows", spec.count)))?;
    let sz = spec.dtype.size();
    match (se.checked_mul(sz), re.checked_mul(sz)) {
        (Some(s), Some(r)) => Ok((s, r)),
        _ => Err(Error::InvalidArgument(format!(
            "count {} overflows",
            spec.count
        ))),
    }
}

/// NCCL's in-place test: the same buffer, or this rank's block of it.
fn in_place(c: &Communicator, spec: &CollSpec, send: usize, recv: usize) -> bool {
    let block = spec.count * spec.dtype.size() * c.rank();
    send == recv
        || (matches!(spec.kind, CollKind::AllGather | CollKind::Gather) && send == recv + block)
        || (matches!(spec.kind, CollKind::ReduceScatter | CollKind::Scatter)
            && recv == send + block)
}

/// Outside a group, run a collective on `stream` if its buffers are device
/// memory (`Ok(true)`); `Ok(false)`, nothing done, where they are host memory
/// (or a group is open), for the caller to take [`collective`]'s way. For the
/// NCCL layer, whose callers may pass either: the device path's own buffer
/// check tells them apart, so the usual device call asks the driver nothing
/// more (the layer's own query cost 0.1–0.25 µs a call, BENCH.md).
///
/// # Safety
/// `comm` null or a handle of this library; device buffers and stream as
/// [`Communicator::collective_on`] requires.
pub unsafe fn collective_if_device(
    comm: *mut FerrocxComm,
    spec: &CollSpec,
    send: *const c_void,
    recv: *mut c_void,
    stream: *mut c_void,
) -> Result<bool> {
    if in_group() {
        return Ok(false);
    }
    // SAFETY: the caller's contract on `comm`.
    let c = &unsafe { comm_ref(comm) }?.comm;
    let (send, recv) = (send as usize, recv as usize);
    let inp = in_place(c, spec, send, recv);
    let first = if inp {
        in_place_span(send, recv, (0, 0)).0
    } else {
        send
    };
    // SAFETY: the caller's contract.
    unsafe { c.collective_on_if_device(spec, first as u64, recv as u64, inp, stream as RawStream) }
}

/// Run (or queue) a collective; errors are reported as `name`'s (the layers
/// over this one pass their own call's name). `device`: whether the buffers
/// are device memory, where the caller already asked the driver (the NCCL
/// layer); `None`: asked here.
///
/// # Safety
/// `comm` null or a handle of this library; buffers (and stream) as the C API's
/// collectives require.
pub unsafe fn collective(
    comm: *mut FerrocxComm,
    name: &str,
    spec: ferrocx::Result<CollSpec>,
    send: *const c_void,
    recv: *mut c_void,
    stream: *mut c_void,
    device: Option<bool>,
) -> i32 {
    guard(name, rank_of(comm), || {
        let spec = spec?;
        // SAFETY: the C caller's contract on `comm`.
        let c = &unsafe { comm_ref(comm) }?.comm;
        let (send, recv) = (send as usize, recv as usize);
        let device = on_device(&[send, recv], stream, device)?;
        let inp = in_place(c, &spec, send, recv);
        let (sb, rb) = extents(c, &spec)?;
        for (what, p, need) in [("send", send, sb), ("receive", recv, rb)] {
            if p == 0 && need > 0 && !inp {
                return Err(Error::InvalidArgument(format!(
                    "{}: the {what} buffer is NULL but {need} bytes are needed",
                    spec.kind.name()
                )));
            }
        }
        let p = Pending::Coll {
            spec,
            send,
            recv,
            in_place: inp,
            device,
            stream: stream as usize,
        };
        if in_group() {
            GROUP.with(|g| g.borrow_mut().1.push((comm as usize, p)));
            return Ok(());
        }
        run_one(c, p)
    })
}

/// The one buffer of an in-place call, (start, bytes): from the lower of the
/// two pointers (NCCL's layouts put the rank's block inside the larger buffer).
fn in_place_span(send: usize, recv: usize, (s, r): (usize, usize)) -> (usize, usize) {
    (send.min(recv), s.max(r) + send.abs_diff(recv))
}

fn run_one(c: &Communicator, p: Pending) -> Result<()> {
    match p {
        Pending::Coll {
            spec,
            send,
            recv,
            in_place,
            device: false,
            ..
        } => {
            let (s, r) = extents(c, &spec)?;
            if in_place {
                let (base, len) = in_place_span(send, recv, (s, r));
                // SAFETY: the C caller's contract: the buffer holds NCCL's in-place layout.
                c.collective_in_place(&spec, unsafe { slice_mut(base, len) })
            } else {
                // SAFETY: the C caller's contract: buffers of NCCL's sizes.
                c.collective(&spec, unsafe { slice(send, s) }, unsafe {
                    slice_mut(recv, r)
                })
            }
        }
        Pending::Coll {
            spec,
            send,
            recv,
            in_place,
            device: true,
            stream,
        } => {
            let s = stream as RawStream;
            // SAFETY: device buffers and stream of the caller's contract.
            unsafe {
                if in_place {
                    c.collective_in_place_on(&spec, in_place_span(send, recv, (0, 0)).0 as u64, s)
                } else {
                    c.collective_on(&spec, send as u64, recv as u64, s)
                }
            }
        }
        // A host send or receive alone: the blocking call, which goes straight
        // to the plugin that wins it (no group built: issue 18).
        Pending::P2p {
            send,
            ptr,
            len,
            peer,
            device: false,
            ..
        } => {
            check_buffer(send, ptr, len)?;
            // SAFETY: the C caller's contract on the buffer until the call returns.
            unsafe {
                if send {
                    c.send(slice(ptr, len), peer)
                } else {
                    c.recv(slice_mut(ptr, len), peer)
                }
            }
        }
        p @ Pending::P2p { .. } => {
            let mut g = c.group_start();
            add_p2p(&mut g, p)?;
            g.group_end()
        }
    }
}

/// A send's or receive's buffer: NULL only when it moves nothing.
fn check_buffer(send: bool, ptr: usize, len: usize) -> Result<()> {
    if ptr == 0 && len > 0 {
        return Err(Error::InvalidArgument(format!(
            "the buffer is NULL but {len} bytes are to be {}",
            if send { "sent" } else { "received" }
        )));
    }
    Ok(())
}

fn add_p2p<'a>(g: &mut ferrocx::Group<'a>, p: Pending) -> Result<()> {
    let Pending::P2p {
        send,
        ptr,
        len,
        peer,
        device,
        stream,
    } = p
    else {
        return Err(Error::InvalidArgument("not a send or receive".into()));
    };
    check_buffer(send, ptr, len)?;
    // SAFETY: the C caller's contract on the buffer (and stream) until the call completes.
    unsafe {
        match (send, device) {
            (true, false) => g.send(slice(ptr, len), peer),
            (false, false) => g.recv(slice_mut(ptr, len), peer),
            (true, true) => g.send_on(ptr as u64, len, peer, stream as RawStream),
            (false, true) => g.recv_on(ptr as u64, len, peer, stream as RawStream),
        }
    }
}

/// Run (or queue) a send (`send`) or a receive of `count` elements; errors are
/// reported as `name`'s; `device` as [`collective`]'s.
///
/// # Safety
/// As [`collective`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn point_to_point(
    comm: *mut FerrocxComm,
    name: &str,
    send: bool,
    buf: *const c_void,
    count: usize,
    dtype: Result<DataType>,
    peer: i32,
    stream: *mut c_void,
    device: Option<bool>,
) -> i32 {
    guard(name, rank_of(comm), || {
        // SAFETY: the C caller's contract on `comm`.
        let c = &unsafe { comm_ref(comm) }?.comm;
        let len = count
            .checked_mul(dtype?.size())
            .ok_or_else(|| Error::InvalidArgument(format!("count {count} overflows")))?;
        let peer = usize::try_from(peer)
            .map_err(|_| Error::InvalidArgument(format!("peer rank {peer} is negative")))?;
        let ptr = buf as usize;
        let device = on_device(&[ptr], stream, device)?;
        let p = Pending::P2p {
            send,
            ptr,
            len,
            peer,
            device,
            stream: stream as usize,
        };
        if in_group() {
            GROUP.with(|g| g.borrow_mut().1.push((comm as usize, p)));
            return Ok(());
        }
        run_one(c, p)
    })
}

/// `ferrocx_group_start`.
#[no_mangle]
pub extern "C" fn ferrocx_group_start() -> i32 {
    guard("ferrocx_group_start", None, || {
        GROUP.with(|g| g.borrow_mut().0 += 1);
        Ok(())
    })
}

/// `ferrocx_group_end`: runs the calls queued since the outermost group start,
/// one group per communicator, in the order the communicators were first named.
#[no_mangle]
pub extern "C" fn ferrocx_group_end() -> i32 {
    guard("ferrocx_group_end", None, || {
        let queued = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.0 == 0 {
                return Err(Error::InvalidArgument(
                    "ferrocx_group_end without ferrocx_group_start".into(),
                ));
            }
            g.0 -= 1;
            Ok(if g.0 == 0 {
                std::mem::take(&mut g.1)
            } else {
                Vec::new()
            })
        })?;
        let mut comms: Vec<(usize, Vec<Pending>)> = Vec::new();
        for (c, p) in queued {
            match comms.iter_mut().find(|(x, _)| *x == c) {
                Some((_, ps)) => ps.push(p),
                None => comms.push((c, vec![p])),
            }
        }
        // One communicator runs here; several (one process driving several ranks, as
        // ncclCommInitAll programs do) run at once, one thread each: run one by one, a
        // host call of the first would wait for ranks whose calls are not issued yet.
        match comms.len() {
            0 => Ok(()),
            1 => {
                let (c, ps) = comms.pop().expect("one");
                run_group(c, ps)
            }
            _ => std::thread::scope(|s| {
                let handles: Vec<_> = comms
                    .into_iter()
                    .map(|(c, ps)| s.spawn(move || run_group(c, ps)))
                    .collect();
                let mut first = Ok(());
                for h in handles {
                    // A panic goes on to the guard (INTERNAL_ERROR).
                    let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    if first.is_ok() {
                        first = r;
                    }
                }
                first
            }),
        }
    })
}

/// Run one communicator's queued calls as one group.
fn run_group(cp: usize, calls: Vec<Pending>) -> Result<()> {
    // SAFETY: checked when the call was queued; the caller keeps it alive.
    let c = &unsafe { comm_ref(cp as *mut FerrocxComm) }?.comm;
    let mut g = c.group_start();
    for p in calls {
        match p {
            p @ Pending::P2p { .. } => add_p2p(&mut g, p)?,
            Pending::Coll {
                spec,
                send,
                recv,
                in_place,
                device,
                stream,
            } => {
                let (s, r) = extents(c, &spec)?;
                // SAFETY: the C caller's contract on the buffers and stream.
                unsafe {
                    match (device, in_place) {
                        (false, false) => {
                            g.collective(&spec, slice(send, s), slice_mut(recv, r))?
                        }
                        (false, true) => {
                            let (base, len) = in_place_span(send, recv, (s, r));
                            g.collective_in_place(&spec, slice_mut(base, len))?
                        }
                        (true, false) => {
                            g.collective_on(&spec, send as u64, recv as u64, stream as RawStream)?
                        }
                        (true, true) => g.collective_in_place_on(
                            &spec,
                            in_place_span(send, recv, (0, 0)).0 as u64,
                            stream as RawStream,
                        )?,
                    }
                }
            }
        }
    }
    g.group_end()
}

macro_rules! spec {
    ($kind:expr, $count:expr, $dtype:expr) => {
        dtype_of($dtype).map(|d| CollSpec::new($kind, d, $count))
    };
}

/// `ferrocx_all_reduce`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_all_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::AllReduce, count, dtype).and_then(|s| Ok(s.op(op_of(op)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_all_reduce", s, send, recv, stream, None) }
}

/// `ferrocx_broadcast`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_broadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::Broadcast, count, dtype).and_then(|s| Ok(s.root(root_of(root)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_broadcast", s, send, recv, stream, None) }
}

/// `ferrocx_reduce`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ferrocx_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: i32,
    root: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::Reduce, count, dtype)
        .and_then(|s| Ok(s.op(op_of(op)?).root(root_of(root)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_reduce", s, send, recv, stream, None) }
}

/// `ferrocx_all_gather`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_all_gather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    // SAFETY: the C caller's contract, passed on.
    unsafe {
        collective(
            comm,
            "ferrocx_all_gather",
            spec!(CollKind::AllGather, count, dtype),
            send,
            recv,
            stream,
            None,
        )
    }
}

/// `ferrocx_reduce_scatter`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::ReduceScatter, count, dtype).and_then(|s| Ok(s.op(op_of(op)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_reduce_scatter", s, send, recv, stream, None) }
}

/// `ferrocx_all_to_all`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_all_to_all(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    // SAFETY: the C caller's contract, passed on.
    unsafe {
        collective(
            comm,
            "ferrocx_all_to_all",
            spec!(CollKind::AllToAll, count, dtype),
            send,
            recv,
            stream,
            None,
        )
    }
}

/// `ferrocx_gather`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_gather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::Gather, count, dtype).and_then(|s| Ok(s.root(root_of(root)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_gather", s, send, recv, stream, None) }
}

/// `ferrocx_scatter`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_scatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    let s = spec!(CollKind::Scatter, count, dtype).and_then(|s| Ok(s.root(root_of(root)?)));
    // SAFETY: the C caller's contract, passed on.
    unsafe { collective(comm, "ferrocx_scatter", s, send, recv, stream, None) }
}

/// `ferrocx_send`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_send(
    buf: *const c_void,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    // SAFETY: the C caller's contract, passed on.
    unsafe {
        point_to_point(
            comm,
            "ferrocx_send",
            true,
            buf,
            count,
            dtype_of(dtype),
            peer,
            stream,
            None,
        )
    }
}

/// `ferrocx_recv`.
///
/// # Safety
/// Buffers and stream as `ferrocx.h` says; `comm` null or a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_recv(
    buf: *mut c_void,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: *mut FerrocxComm,
    stream: *mut c_void,
) -> i32 {
    // SAFETY: the C caller's contract, passed on.
    unsafe {
        point_to_point(
            comm,
            "ferrocx_recv",
            false,
            buf as *const c_void,
            count,
            dtype_of(dtype),
            peer,
            stream,
            None,
        )
    }
}

/// `ferrocx_register`.
///
/// # Safety
/// `buf..buf+bytes` stays allocated until deregistered; `handle` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_register(
    comm: *mut FerrocxComm,
    buf: *mut c_void,
    bytes: usize,
    handle: *mut *mut c_void,
) -> i32 {
    guard("ferrocx_register", rank_of(comm), || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle.as_mut() }
            .ok_or_else(|| Error::InvalidArgument("handle is NULL".into()))?;
        *h = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let c = &unsafe { comm_ref(comm) }?.comm;
        if buf.is_null() {
            return Err(Error::InvalidArgument("the buffer is NULL".into()));
        }
        let reg = if on_device(&[buf as usize], std::ptr::null_mut(), None)? {
            // SAFETY: the caller's contract.
            unsafe { c.register_device(buf as u64, bytes)? }
        } else {
            // SAFETY: the caller's contract.
            c.register(unsafe { slice(buf as usize, bytes) })?
        };
        *h = Box::into_raw(Box::new(reg)) as *mut c_void;
        Ok(())
    })
}

/// `ferrocx_deregister`.
///
/// # Safety
/// `handle` from `ferrocx_register` on this communicator, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_deregister(comm: *mut FerrocxComm, handle: *mut c_void) -> i32 {
    guard("ferrocx_deregister", rank_of(comm), || {
        // SAFETY: the caller's contract.
        let c = &unsafe { comm_ref(comm) }?.comm;
        if handle.is_null() {
            return Err(Error::InvalidArgument("the handle is NULL".into()));
        }
        // SAFETY: a handle of ferrocx_register, freed once.
        let reg = unsafe { Box::from_raw(handle as *mut ferrocx::RegHandle) };
        c.deregister(*reg)
    })
}
