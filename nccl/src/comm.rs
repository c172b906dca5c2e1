//! `ncclComm_t`: a handle over a ferrocx C-API communicator, with what NCCL
//! adds (operators made by `ncclRedOpCreatePreMulSum`, creation deferred to a
//! group's end); and the calls that run every entry point.

use crate::codes;
use crate::premul::Ops;
use ferrocx::{Error, Result};
use ferrocx_c::FerrocxComm;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

const MAGIC: u64 = 0x6e63_636c_2d66_7863; // "nccl-fxc"
const FREED: u64 = 0xdead_0000_0000_0001;

/// What an `ncclComm_t` points to.
pub struct NcclComm {
    magic: u64,
    /// The ferrocx communicator; null until a creation deferred to a group's end ran.
    inner: AtomicPtr<FerrocxComm>,
    /// Why a deferred creation failed: every later call on the handle says so.
    failed: Mutex<Option<(i32, String)>>,
    /// Operators of `ncclRedOpCreatePreMulSum` (index = op − ncclNumOps).
    pub(crate) ops: Ops,
    /// This rank, the number of ranks and the CUDA device (−1: none), known at the call.
    pub rank: i32,
    pub nranks: i32,
    pub device: i32,
}

impl NcclComm {
    /// A handle; `inner` null while its creation waits for the group's end.
    pub fn boxed(inner: *mut FerrocxComm, rank: i32, nranks: i32, device: i32) -> *mut NcclComm {
        Box::into_raw(Box::new(NcclComm {
            magic: MAGIC,
            inner: AtomicPtr::new(inner),
            failed: Mutex::new(None),
            ops: Ops::default(),
            rank,
            nranks,
            device,
        }))
    }

    /// The ferrocx communicator, or why there is none.
    pub fn inner(&self) -> Result<*mut FerrocxComm> {
        let p = self.inner.load(Ordering::Acquire);
        if !p.is_null() {
            return Ok(p);
        }
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((_, why)) => Err(Error::InvalidArgument(format!(
                "this communicator was not created: {why}"
            ))),
            None => Err(Error::InvalidArgument(
                "this communicator is created at the end of the group that made it: call ncclGroupEnd first".into(),
            )),
        }
    }

    /// The deferred creation's outcome.
    pub fn created(&self, r: std::result::Result<*mut FerrocxComm, (i32, String)>) {
        match r {
            Ok(p) => self.inner.store(p, Ordering::Release),
            Err(e) => *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e),
        }
    }

    /// The failed creation's NCCL result, if it failed.
    pub fn creation_error(&self) -> Option<i32> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(c, _)| *c)
    }
}

/// The handle behind `p`, checked (null, freed or not ours → an error).
///
/// # Safety
/// `p` null or a handle of this library (after it was freed, the check reads
/// memory the allocator may have reused: a best effort, as in the C API).
pub unsafe fn handle<'a>(p: *mut NcclComm) -> Result<&'a NcclComm> {
    // SAFETY: the caller's contract.
    let c = unsafe { p.as_ref() }
        .ok_or_else(|| Error::InvalidArgument("the communicator is NULL".into()))?;
    match c.magic {
        MAGIC => Ok(c),
        FREED => Err(Error::Destroyed(
            "the communicator was destroyed (ncclCommDestroy/ncclCommAbort)".into(),
        )),
        _ => Err(Error::InvalidArgument(
            "the communicator is not an ncclComm_t of this library".into(),
        )),
    }
}

/// The rank of a handle, for messages.
pub(crate) fn rank_of(p: *mut NcclComm) -> Option<usize> {
    // SAFETY: a best-effort read, as in `handle`.
    unsafe { handle(p) }
        .ok()
        .and_then(|c| usize::try_from(c.rank).ok())
}

/// Free a handle (its ferrocx communicator is the caller's to release first).
///
/// # Safety
/// `p` a live handle of this library, not used again.
pub unsafe fn free(p: *mut NcclComm) {
    // SAFETY: the caller's contract: a live handle, freed once.
    let mut b = unsafe { Box::from_raw(p) };
    b.magic = FREED;
    drop(b);
}

/// Run an entry point: NCCL's result, the message kept for `ncclGetLastError`,
/// panics caught (the C API's guard does the work; codes are mapped).
pub fn call(name: &str, rank: Option<usize>, f: impl FnOnce() -> Result<()>) -> i32 {
    codes::result_of(ferrocx_c::guard(name, rank, f))
}

/// Record a message for `ncclGetLastError` and return `code` (for results NCCL
/// has and ferrocx's codes do not say, such as ncclUnhandledCudaError).
pub fn fail(name: &str, rank: Option<usize>, code: i32, why: &str) -> i32 {
    let who = rank.map_or(String::new(), |r| format!("rank {r}: "));
    ferrocx_c::set_last(&format!("{who}{name}: {why}"));
    code
}

/// Write `v` to the caller's `p`.
pub(crate) fn out<T>(p: *mut T, what: &str, v: T) -> Result<()> {
    // SAFETY: the C caller's contract: null or writable.
    let o =
        unsafe { p.as_mut() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is NULL")))?;
    *o = v;
    Ok(())
}

/// Run a C-API call on `comm`'s ferrocx communicator; its result as NCCL's.
pub(crate) fn on_inner(
    name: &str,
    comm: *mut NcclComm,
    f: impl FnOnce(*mut ferrocx_c::FerrocxComm) -> i32,
) -> i32 {
    // SAFETY: the C caller's contract on `comm`.
    match unsafe { handle(comm) }.and_then(|c| c.inner()) {
        Ok(inner) => codes::result_of(f(inner)),
        Err(e) => call(name, rank_of(comm), || Err(e)),
    }
}
