//! Communicator handles: unique ids, init, split, finalize/destroy/abort,
//! queries.

use crate::status::{guard, set_last};
use ferrocx::{Communicator, Error, Result};
use std::ffi::c_char;

const MAGIC: u64 = 0x6665_7272_6f63_7863; // "ferrocxc"
const FREED: u64 = 0xdead_0000_0000_0000;

/// What a `ferrocx_comm_t` points to.
pub struct FerrocxComm {
    magic: u64,
    pub(crate) comm: Communicator,
}

/// The handle behind `p`, checked (null, freed or not ours → an error).
///
/// # Safety
/// `p` must be null or a pointer this library returned (possibly freed since:
/// the check then reads memory the allocator may have reused, as a best effort).
pub(crate) unsafe fn comm_ref<'a>(p: *mut FerrocxComm) -> Result<&'a FerrocxComm> {
    // SAFETY: the caller's contract.
    let c = unsafe { p.as_ref() }
        .ok_or_else(|| Error::InvalidArgument("the communicator is NULL".into()))?;
    match c.magic {
        MAGIC => Ok(c),
        FREED => Err(Error::Destroyed("the communicator was destroyed".into())),
        _ => Err(Error::InvalidArgument(
            "the communicator is not a ferrocx_comm_t".into(),
        )),
    }
}

/// The rank of a handle for messages (`None` when it is not valid).
pub(crate) fn rank_of(p: *mut FerrocxComm) -> Option<usize> {
    // SAFETY: a best-effort read for a message, as in comm_ref.
    unsafe { comm_ref(p) }.ok().map(|c| c.comm.rank())
}

/// The communicator behind a handle (for layers over this API).
///
/// # Safety
/// `p` null or a handle this library returned (a freed one is detected as a best
/// effort, reading memory the allocator may have reused).
pub unsafe fn communicator<'a>(p: *mut FerrocxComm) -> Result<&'a Communicator> {
    // SAFETY: the caller's contract.
    unsafe { comm_ref(p) }.map(|c| &c.comm)
}

/// A handle for `comm`, to be freed by `ferrocx_comm_destroy` or `ferrocx_comm_abort`.
pub fn into_handle(comm: Communicator) -> *mut FerrocxComm {
    boxed(comm)
}

fn boxed(comm: Communicator) -> *mut FerrocxComm {
    Box::into_raw(Box::new(FerrocxComm { magic: MAGIC, comm }))
}

fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the C caller's contract: null or writable.
    unsafe { p.as_mut() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is NULL")))
}

/// A free TCP port on the interface this host routes by (no packet is sent).
pub fn free_address() -> Result<String> {
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    let l = std::net::TcpListener::bind((ip, 0))
        .map_err(|e| Error::Io(format!("finding a free port on {ip}: {e}")))?;
    let a = l.local_addr().map_err(|e| Error::Io(e.to_string()))?;
    Ok(a.to_string())
}

/// `ferrocx_get_unique_id`.
///
/// # Safety
/// `id` must be null or point to a writable `ferrocx_unique_id_t`.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_get_unique_id(
    id: *mut [c_char; crate::FERROCX_UNIQUE_ID_BYTES],
) -> i32 {
    guard("ferrocx_get_unique_id", None, || {
        let id = out(id, "id")?;
        let addr = match std::env::var("FERROCX_COMM_ID") {
            Ok(a) if !a.is_empty() => a,
            _ => free_address()?,
        };
        if addr.len() >= id.len() {
            return Err(Error::InvalidArgument(format!(
                "address {addr} too long for a unique id"
            )));
        }
        id.fill(0);
        for (o, b) in id.iter_mut().zip(addr.bytes()) {
            *o = b as c_char;
        }
        Ok(())
    })
}

/// `ferrocx_comm_init_rank`.
///
/// # Safety
/// `comm` writable; `id` readable (from `ferrocx_get_unique_id` on some rank).
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_init_rank(
    comm: *mut *mut FerrocxComm,
    nranks: i32,
    id: *const [c_char; crate::FERROCX_UNIQUE_ID_BYTES],
    rank: i32,
) -> i32 {
    let r = usize::try_from(rank).ok();
    guard("ferrocx_comm_init_rank", r, || {
        let comm = out(comm, "comm")?;
        *comm = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let id =
            unsafe { id.as_ref() }.ok_or_else(|| Error::InvalidArgument("id is NULL".into()))?;
        let bytes: Vec<u8> = id
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let root = String::from_utf8(bytes).map_err(|_| {
            Error::InvalidArgument("the unique id is not one of ferrocx_get_unique_id".into())
        })?;
        let (Ok(n), Ok(r)) = (usize::try_from(nranks), usize::try_from(rank)) else {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of {nranks} ranks"
            )));
        };
        *comm = boxed(Communicator::new(&root, r, n)?);
        Ok(())
    })
}

/// `ferrocx_comm_init_from_env`.
///
/// # Safety
/// `comm` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_init_from_env(comm: *mut *mut FerrocxComm) -> i32 {
    guard("ferrocx_comm_init_from_env", None, || {
        let comm = out(comm, "comm")?;
        *comm = std::ptr::null_mut();
        *comm = boxed(Communicator::from_env()?);
        Ok(())
    })
}

/// `ferrocx_comm_split`.
///
/// # Safety
/// `comm` a handle of this library; `newcomm` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_split(
    comm: *mut FerrocxComm,
    color: i32,
    key: i32,
    newcomm: *mut *mut FerrocxComm,
) -> i32 {
    guard("ferrocx_comm_split", rank_of(comm), || {
        let newcomm = out(newcomm, "newcomm")?;
        *newcomm = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm) }?;
        if let Some(sub) = c.comm.split(color, key)? {
            *newcomm = boxed(sub);
        }
        Ok(())
    })
}

/// `ferrocx_comm_finalize`.
///
/// # Safety
/// `comm` a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_finalize(comm: *mut FerrocxComm) -> i32 {
    guard("ferrocx_comm_finalize", rank_of(comm), || {
        // SAFETY: the caller's contract.
        unsafe { comm_ref(comm) }?.comm.destroy()
    })
}

/// `ferrocx_comm_destroy`.
///
/// # Safety
/// `comm` a handle of this library, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_destroy(comm: *mut FerrocxComm) -> i32 {
    guard("ferrocx_comm_destroy", rank_of(comm), || {
        // SAFETY: the caller's contract.
        unsafe { comm_ref(comm) }?;
        // SAFETY: a live handle of ours, freed once (marked first, for a later misuse).
        let mut b = unsafe { Box::from_raw(comm) };
        b.magic = FREED;
        let r = match b.comm.destroy() {
            Err(Error::Destroyed(_)) => Ok(()), // finalized before
            r => r,
        };
        drop(b);
        r
    })
}

/// `ferrocx_comm_abort`.
///
/// # Safety
/// `comm` a handle of this library, not used again.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_abort(comm: *mut FerrocxComm) -> i32 {
    guard("ferrocx_comm_abort", rank_of(comm), || {
        // SAFETY: the caller's contract.
        unsafe { comm_ref(comm) }?;
        // SAFETY: a live handle of ours, freed once.
        let mut b = unsafe { Box::from_raw(comm) };
        b.magic = FREED;
        b.comm.abort();
        Ok(())
    })
}

/// `ferrocx_comm_get_async_error`.
///
/// # Safety
/// `comm` a handle of this library; `err` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_get_async_error(
    comm: *mut FerrocxComm,
    err: *mut i32,
) -> i32 {
    guard("ferrocx_comm_get_async_error", rank_of(comm), || {
        let err = out(err, "async_error")?;
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm) }?;
        *err = match c.comm.device_error() {
            Ok(()) => crate::FERROCX_SUCCESS,
            Err(e) => {
                set_last(&format!("rank {}: asynchronous error: {e}", c.comm.rank()));
                crate::status::code_of(&e)
            }
        };
        Ok(())
    })
}

unsafe fn query(
    comm: *mut FerrocxComm,
    outp: *mut i32,
    what: &str,
    f: impl FnOnce(&Communicator) -> i32,
) -> i32 {
    guard(what, rank_of(comm), || {
        let o = out(outp, "the result pointer")?;
        // SAFETY: the caller's contract.
        *o = f(&unsafe { comm_ref(comm) }?.comm);
        Ok(())
    })
}

/// `ferrocx_comm_rank`.
///
/// # Safety
/// `comm` a handle of this library; `rank` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_rank(comm: *mut FerrocxComm, rank: *mut i32) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { query(comm, rank, "ferrocx_comm_rank", |c| c.rank() as i32) }
}

/// `ferrocx_comm_count`.
///
/// # Safety
/// `comm` a handle of this library; `nranks` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_count(comm: *mut FerrocxComm, nranks: *mut i32) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { query(comm, nranks, "ferrocx_comm_count", |c| c.nranks() as i32) }
}

/// `ferrocx_comm_device`.
///
/// # Safety
/// `comm` a handle of this library; `device` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_comm_device(comm: *mut FerrocxComm, device: *mut i32) -> i32 {
    // SAFETY: the caller's contract.
    unsafe {
        query(comm, device, "ferrocx_comm_device", |c| {
            c.device().unwrap_or(-1)
        })
    }
}
