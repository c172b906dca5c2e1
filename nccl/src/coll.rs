//! Collectives, send/recv and groups: NCCL's numbers mapped, then the C API's
//! own calls (which check buffers, tell host from device memory, queue in
//! groups). Host buffers given with a stream: the stream is waited for
//! first, so the call sees what was queued before it, then the call runs to
//! completion.

use crate::codes::{self, Op, Type};
use crate::comm::{call, handle, rank_of, NcclComm};
use ferrocx::{CollKind, CollSpec, Error, Result};
use ferrocx_sdk::spans::{self, Point};
use std::cell::RefCell;
use std::ffi::c_void;

thread_local! {
    /// Pre-multiplied copies of queued calls' inputs, kept until the group ends.
    static SCALED: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// The stream to pass on: host buffers wait for the caller's stream here and
/// go on without one. Device buffers keep theirs (`Some`: to wait for, see [`crate::wait`]).
fn stream_for(ptrs: &[usize], stream: *mut c_void) -> Result<(*mut c_void, bool)> {
    let host = ptrs
        .iter()
        .find(|&&p| p != 0)
        .is_none_or(|&p| ferrocx_sdk::cuda::device_of(p).is_none());
    if !host || stream.is_null() {
        return Ok((stream, !host));
    }
    // SAFETY: the C caller's contract: a stream of the current context.
    unsafe { crate::cuda::synchronize(stream as usize) }?;
    Ok((std::ptr::null_mut(), false))
}

/// What [`after`] needs of a call: the C API's communicator, its host-bound
/// count before the call ([`crate::wait::mark`]) and the stream.
type Issued = (*mut ferrocx_c::FerrocxComm, Option<u64>, *mut c_void);

/// NCCL's result of a call that the C API ran (`code`); a device call that
/// may wait for a host thread then completes before returning ([`crate::wait`]).
fn after(name: &str, comm: *mut NcclComm, code: i32, device: bool, issued: Issued) -> i32 {
    let r = codes::result_of(code);
    if r != codes::SUCCESS || !device {
        return r;
    }
    let (inner, before, stream) = issued;
    let _span = spans::enter(Point::NcclBlocking);
    call(name, rank_of(comm), || {
        crate::wait::issued(inner, before, stream)
    })
}

/// Elements of the send buffer of a reduction of `count` on `nranks` ranks.
fn send_elems(kind: CollKind, count: usize, nranks: usize) -> Result<usize> {
    match kind {
        CollKind::ReduceScatter => count
            .checked_mul(nranks)
            .ok_or_else(|| Error::InvalidArgument(format!("count {count} overflows"))),
        _ => Ok(count),
    }
}

/// A collective as NCCL calls it.
#[allow(clippy::too_many_arguments)]
fn collective(
    name: &str,
    kind: CollKind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: Option<i32>,
    root: Option<i32>,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    let _span = spans::enter(Point::NcclCall);
    let mut ready = None;
    let mut ran = None;
    let r = call(name, rank_of(comm), || {
        // SAFETY: the C caller's contract on `comm`.
        let c = unsafe { handle(comm) }?;
        let inner = c.inner()?;
        let t: Type = codes::dtype(dtype).map_err(Error::InvalidArgument)?;
        let mut spec = CollSpec::new(kind, t.fx, count);
        let mut send = send;
        let mut scaled = None;
        if let Some(op) = op {
            match codes::op(op).map_err(Error::InvalidArgument)? {
                Op::Builtin(o) => spec = spec.op(o),
                Op::Custom(i) => {
                    let pm = c.ops.get(i)?;
                    if send.is_null() || ferrocx_sdk::cuda::device_of(send as usize).is_some() {
                        return Err(Error::Unsupported(
                            "ncclRedOpCreatePreMulSum operators run on host buffers only (ferrocx has no device scaling kernel yet)".into(),
                        ));
                    }
                    let n = send_elems(kind, count, c.nranks as usize)?;
                    let bytes = n.checked_mul(t.size).ok_or_else(|| {
                        Error::InvalidArgument(format!("count {count} overflows"))
                    })?;
                    // SAFETY: the C caller's contract: the send buffer holds NCCL's layout.
                    let src = unsafe { std::slice::from_raw_parts(send as *const u8, bytes) };
                    let copy = pm.apply(dtype, &t, src)?;
                    send = copy.as_ptr() as *const c_void;
                    scaled = Some(copy);
                    spec = spec.op(ferrocx::RedOp::Sum);
                }
            }
        }
        if let Some(root) = root {
            let r = usize::try_from(root)
                .map_err(|_| Error::InvalidArgument(format!("root {root} is negative")))?;
            spec = spec.root(r);
        }
        let span = spans::enter(Point::NcclBlocking);
        let before = crate::wait::mark(inner);
        drop(span);
        // The usual call (device buffers, no group, no scaled copy) goes
        // straight to the core, whose buffer check tells host memory apart.
        let ran_on_device = scaled.is_none() && {
            // SAFETY: the C caller's contract on the buffers and stream, passed
            // on; `inner` is a live handle of the C API.
            unsafe { ferrocx_c::collective_if_device(inner, &spec, send, recv, stream) }?
        };
        if ran_on_device {
            ran = Some((inner, before));
            return Ok(());
        }
        let span = spans::enter(Point::NcclPointerQuery);
        let (stream, device) = stream_for(&[send as usize, recv as usize], stream)?;
        drop(span);
        ready = Some((inner, spec, send, stream, device, scaled, before));
        Ok(())
    });
    if let Some((inner, before)) = ran {
        return after(
            name,
            comm,
            ferrocx_c::FERROCX_SUCCESS,
            true,
            (inner, before, stream),
        );
    }
    let Some((inner, spec, send, stream, device, scaled, before)) = ready else {
        return r;
    };
    // SAFETY: the C caller's contract on the buffers and stream, passed on; `inner`
    // is a live handle of the C API.
    let code =
        unsafe { ferrocx_c::collective(inner, name, Ok(spec), send, recv, stream, Some(device)) };
    if let Some(copy) = scaled {
        if ferrocx_c::group_depth() > 0 {
            // Queued: the copy is read at the group's end.
            SCALED.with(|s| s.borrow_mut().push(copy));
        }
    }
    after(name, comm, code, device, (inner, before, stream))
}

/// `ncclAllReduce`.
#[no_mangle]
pub extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclAllReduce",
        CollKind::AllReduce,
        send,
        recv,
        count,
        dtype,
        Some(op),
        None,
        comm,
        stream,
    )
}

/// `ncclBroadcast`.
#[no_mangle]
pub extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclBroadcast",
        CollKind::Broadcast,
        send,
        recv,
        count,
        dtype,
        None,
        Some(root),
        comm,
        stream,
    )
}

/// `ncclBcast`: in-place broadcast (the legacy name).
#[no_mangle]
pub extern "C" fn ncclBcast(
    buf: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclBcast",
        CollKind::Broadcast,
        buf,
        buf,
        count,
        dtype,
        None,
        Some(root),
        comm,
        stream,
    )
}

/// `ncclReduce`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    op: i32,
    root: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclReduce",
        CollKind::Reduce,
        send,
        recv,
        count,
        dtype,
        Some(op),
        Some(root),
        comm,
        stream,
    )
}

/// `ncclAllGather`.
#[no_mangle]
pub extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclAllGather",
        CollKind::AllGather,
        send,
        recv,
        sendcount,
        dtype,
        None,
        None,
        comm,
        stream,
    )
}

/// `ncclReduceScatter`.
#[no_mangle]
pub extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: i32,
    op: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclReduceScatter",
        CollKind::ReduceScatter,
        send,
        recv,
        recvcount,
        dtype,
        Some(op),
        None,
        comm,
        stream,
    )
}

/// `ncclAlltoAll`: `count` elements to and from each rank.
#[no_mangle]
pub extern "C" fn ncclAlltoAll(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclAlltoAll",
        CollKind::AllToAll,
        send,
        recv,
        count,
        dtype,
        None,
        None,
        comm,
        stream,
    )
}

/// `ncclGather`: `count` elements from each rank to `root`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclGather",
        CollKind::Gather,
        send,
        recv,
        count,
        dtype,
        None,
        Some(root),
        comm,
        stream,
    )
}

/// `ncclScatter`: `count` elements from `root` to each rank.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    root: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    collective(
        "ncclScatter",
        CollKind::Scatter,
        send,
        recv,
        count,
        dtype,
        None,
        Some(root),
        comm,
        stream,
    )
}

#[allow(clippy::too_many_arguments)]
fn p2p(
    name: &str,
    send: bool,
    buf: *const c_void,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    let _span = spans::enter(Point::NcclCall);
    let mut ready = None;
    let r = call(name, rank_of(comm), || {
        // SAFETY: the C caller's contract on `comm`.
        let inner = unsafe { handle(comm) }?.inner()?;
        let t = codes::dtype(dtype).map_err(Error::InvalidArgument)?;
        let (stream, device) = stream_for(&[buf as usize], stream)?;
        ready = Some((inner, t, stream, device));
        Ok(())
    });
    let Some((inner, t, stream, device)) = ready else {
        return r;
    };
    let span = spans::enter(Point::NcclBlocking);
    let before = crate::wait::mark(inner);
    drop(span);
    // SAFETY: as in `collective`.
    let code = unsafe {
        ferrocx_c::point_to_point(
            inner,
            name,
            send,
            buf,
            count,
            Ok(t.fx),
            peer,
            stream,
            Some(device),
        )
    };
    after(name, comm, code, device, (inner, before, stream))
}

/// `ncclSend`.
#[no_mangle]
pub extern "C" fn ncclSend(
    buf: *const c_void,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    p2p("ncclSend", true, buf, count, dtype, peer, comm, stream)
}

/// `ncclRecv`.
#[no_mangle]
pub extern "C" fn ncclRecv(
    buf: *mut c_void,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: *mut NcclComm,
    stream: *mut c_void,
) -> i32 {
    p2p("ncclRecv", false, buf, count, dtype, peer, comm, stream)
}

/// `ncclGroupStart`.
#[no_mangle]
pub extern "C" fn ncclGroupStart() -> i32 {
    codes::result_of(ferrocx_c::ferrocx_group_start())
}

/// `ncclGroupEnd`: at the outermost end, the group's communicator creations
/// run (at once), then its calls (one group per communicator, communicators at once).
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> i32 {
    match ferrocx_c::group_depth() {
        0 => call("ncclGroupEnd", None, || {
            Err(Error::Unsupported(
                "ncclGroupEnd without ncclGroupStart".into(),
            ))
        }),
        1 => {
            let created = call("ncclGroupEnd", None, crate::init::finish_deferred);
            let mut ran = codes::result_of(ferrocx_c::ferrocx_group_end());
            SCALED.with(|s| s.borrow_mut().clear());
            let waited = call("ncclGroupEnd", None, || {
                crate::wait::group_ended(ran == codes::SUCCESS)
            });
            if ran == codes::SUCCESS {
                ran = waited;
            }
            if created != codes::SUCCESS {
                created
            } else {
                ran
            }
        }
        _ => codes::result_of(ferrocx_c::ferrocx_group_end()),
    }
}
