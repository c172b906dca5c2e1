//! Creating communicators: unique ids, `ncclCommInitRank(Config)`,
//! `ncclCommInitAll`, `ncclCommInitRankScalable`, `ncclCommSplit`,
//! `ncclCommShrink`. A creation inside `ncclGroupStart/End` runs at the
//! group's end, all of the group's creations at once (one process may make
//! several ranks of one communicator that way).

use crate::comm::{call, handle, out, rank_of, NcclComm};
use crate::cuda;
use ferrocx::{CommConfig, Communicator, Error, Result};
use std::cell::RefCell;
use std::ffi::c_char;

/// Bytes of an `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: i32 = -1;
/// `ncclUniqueId` (passed by value: a 128-byte struct).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

/// `ncclConfig_t::magic` of `NCCL_CONFIG_INITIALIZER`.
pub const CONFIG_MAGIC: u32 = 0xcafe_beef;

/// The leading fields of `ncclConfig_t` this layer reads (the struct is
/// append-only and says its size: fields beyond `size` are not read).
#[repr(C)]
pub struct ConfigHead {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub blocking: i32,
    pub cga_cluster_size: i32,
    pub min_ctas: i32,
    pub max_ctas: i32,
    pub net_name: *const c_char,
    pub split_share: i32,
    pub traffic_class: i32,
    pub comm_name: *const c_char,
}

/// Check a caller's `ncclConfig_t` (null is the default).
fn check_config(config: *const ConfigHead) -> Result<()> {
    // SAFETY: the C caller's contract: null or an ncclConfig_t, whose first
    // fields (size, magic, version) every version has.
    let Some(c) = (unsafe { config.as_ref() }) else {
        return Ok(());
    };
    if c.magic != CONFIG_MAGIC {
        return Err(Error::InvalidArgument(format!(
            "the ncclConfig_t was not initialized with NCCL_CONFIG_INITIALIZER (magic {:#x})",
            c.magic
        )));
    }
    if c.size < 16 {
        return Err(Error::InvalidArgument(format!(
            "ncclConfig_t size {} is too small",
            c.size
        )));
    }
    // blocking = 0 asks for ncclInProgress answers; creation here always
    // completes before returning, which such callers accept (they poll
    // ncclCommGetAsyncError, which then says ncclSuccess).
    Ok(())
}

/// The address inside a unique id.
fn root_of(id: *const UniqueId) -> Result<String> {
    // SAFETY: the C caller's contract: an ncclUniqueId.
    let id = unsafe { id.as_ref() }
        .ok_or_else(|| Error::InvalidArgument("the unique id is NULL".into()))?;
    let bytes: Vec<u8> = id
        .internal
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8(bytes)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "the unique id is not one of ncclGetUniqueId (of this library)".into(),
            )
        })
}

fn config_for(root: String, nranks: i32, rank: i32, device: Option<i32>) -> Result<CommConfig> {
    let (Ok(n), Ok(r)) = (usize::try_from(nranks), usize::try_from(rank)) else {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} of {nranks} ranks"
        )));
    };
    if n == 0 || r >= n {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} out of range: {nranks} ranks"
        )));
    }
    Ok(CommConfig {
        root,
        rank: r,
        nranks: n,
        timeout: None,
        secret: None,
        device,
    })
}

/// Create every communicator of `cfgs`, at once when several (ranks of one
/// communicator in one process wait for each other).
fn create_all(cfgs: Vec<CommConfig>) -> Vec<Result<Communicator>> {
    if cfgs.len() == 1 {
        return cfgs.into_iter().map(Communicator::with_config).collect();
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = cfgs
            .into_iter()
            .map(|c| s.spawn(move || Communicator::with_config(c)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

thread_local! {
    /// Creations queued in this thread's open group: (handle, configuration).
    static DEFERRED: RefCell<Vec<(usize, CommConfig)>> = const { RefCell::new(Vec::new()) };
}

/// Run the creations queued in the group that ends now; the first failure.
pub fn finish_deferred() -> Result<()> {
    let queued = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    if queued.is_empty() {
        return Ok(());
    }
    let (handles, cfgs): (Vec<usize>, Vec<CommConfig>) = queued.into_iter().unzip();
    let mut first = Ok(());
    for (h, r) in handles.into_iter().zip(create_all(cfgs)) {
        // SAFETY: handles queued by ncclCommInitRank*, not freed before the group ends.
        let Ok(c) = (unsafe { handle(h as *mut NcclComm) }) else {
            continue;
        };
        match r {
            Ok(comm) => c.created(Ok(ferrocx_c::into_handle(comm))),
            Err(e) => {
                let code = crate::codes::result_of(ferrocx_c::code_of(&e));
                let why = format!("rank {}: ncclCommInitRank (at ncclGroupEnd): {e}", c.rank);
                c.created(Err((code, why.clone())));
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
    first
}

/// Make (or, inside a group, queue) one communicator for the handle `comm`.
fn init_one(comm: *mut *mut NcclComm, cfg: CommConfig) -> Result<()> {
    out(comm, "comm", std::ptr::null_mut())?;
    let device = cfg.device.unwrap_or(-1);
    let (rank, nranks) = (cfg.rank as i32, cfg.nranks as i32);
    if ferrocx_c::group_depth() > 0 {
        let h = NcclComm::boxed(std::ptr::null_mut(), rank, nranks, device);
        DEFERRED.with(|d| d.borrow_mut().push((h as usize, cfg)));
        return out(comm, "comm", h);
    }
    let c = Communicator::with_config(cfg)?;
    let device = c.device().unwrap_or(-1);
    out(
        comm,
        "comm",
        NcclComm::boxed(ferrocx_c::into_handle(c), rank, nranks, device),
    )
}

/// `ncclGetUniqueId`: the address of a free port of this host (or
/// `FERROCX_COMM_ID` / `NCCL_COMM_ID` when set).
///
/// # Safety
/// `id` null or a writable `ncclUniqueId`.
#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> i32 {
    crate::env::prepare();
    // SAFETY: the caller's contract; the layouts are the same (128 bytes).
    crate::codes::result_of(unsafe { ferrocx_c::ferrocx_get_unique_id(id.cast()) })
}

/// `ncclCommInitRankConfig`.
///
/// # Safety
/// `comm` writable; `id` an `ncclUniqueId`; `config` null or an `ncclConfig_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut *mut NcclComm,
    nranks: i32,
    id: UniqueId,
    rank: i32,
    config: *const ConfigHead,
) -> i32 {
    crate::env::prepare();
    call("ncclCommInitRank", usize::try_from(rank).ok(), || {
        check_config(config)?;
        let cfg = config_for(root_of(&id)?, nranks, rank, cuda::current_device())?;
        init_one(comm, cfg)
    })
}

/// `ncclCommInitRank`.
///
/// # Safety
/// `comm` writable; `id` an `ncclUniqueId`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut *mut NcclComm,
    nranks: i32,
    id: UniqueId,
    rank: i32,
) -> i32 {
    // SAFETY: the caller's contract; no config.
    unsafe { ncclCommInitRankConfig(comm, nranks, id, rank, std::ptr::null()) }
}

/// `ncclCommInitRankScalable`: the first id names the rendezvous (ferrocx's
/// bootstrap has one root).
///
/// # Safety
/// `comm` writable; `ids` `nids` ncclUniqueIds; `config` null or an `ncclConfig_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    comm: *mut *mut NcclComm,
    nranks: i32,
    rank: i32,
    nids: i32,
    ids: *const UniqueId,
    config: *const ConfigHead,
) -> i32 {
    crate::env::prepare();
    call(
        "ncclCommInitRankScalable",
        usize::try_from(rank).ok(),
        || {
            if nids < 1 || ids.is_null() {
                return Err(Error::InvalidArgument(format!("{nids} unique ids given")));
            }
            check_config(config)?;
            let cfg = config_for(root_of(ids)?, nranks, rank, cuda::current_device())?;
            init_one(comm, cfg)
        },
    )
}

/// `ncclCommInitAll`: `ndev` ranks of one new communicator in this process,
/// rank i on device `devlist[i]` (or i), made at once.
///
/// # Safety
/// `comms` writable for `ndev` handles; `devlist` null or `ndev` ints.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut NcclComm,
    ndev: i32,
    devlist: *const i32,
) -> i32 {
    crate::env::prepare();
    call("ncclCommInitAll", None, || {
        let n = usize::try_from(ndev)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::InvalidArgument(format!("ndev {ndev}")))?;
        if comms.is_null() {
            return Err(Error::InvalidArgument("comms is NULL".into()));
        }
        // SAFETY: the caller's contract: `ndev` writable handles.
        let slots = unsafe { std::slice::from_raw_parts_mut(comms, n) };
        slots.fill(std::ptr::null_mut());
        let devices: Vec<Option<i32>> = match (devlist.is_null(), ferrocx_sdk::cuda::available()) {
            // SAFETY: the caller's contract: `ndev` ints.
            (false, _) => unsafe { std::slice::from_raw_parts(devlist, n) }
                .iter()
                .map(|&d| Some(d))
                .collect(),
            (true, Ok(_)) => (0..ndev).map(Some).collect(),
            (true, Err(_)) => vec![Some(-1); n],
        };
        // A fresh port every time: these ranks meet inside this process.
        let root = ferrocx_c::free_address()?;
        let cfgs = devices
            .iter()
            .enumerate()
            .map(|(r, &d)| config_for(root.clone(), ndev, r as i32, d))
            .collect::<Result<Vec<_>>>()?;
        // All or nothing: made ones are released when one failed.
        let made = create_all(cfgs).into_iter().collect::<Result<Vec<_>>>()?;
        for (r, (slot, c)) in slots.iter_mut().zip(made).enumerate() {
            let dev = c.device().unwrap_or(-1);
            *slot = NcclComm::boxed(ferrocx_c::into_handle(c), r as i32, ndev, dev);
        }
        Ok(())
    })
}

/// A handle for a communicator a split or shrink made.
fn wrap(c: Communicator) -> *mut NcclComm {
    let (rank, nranks, dev) = (c.rank() as i32, c.nranks() as i32, c.device().unwrap_or(-1));
    NcclComm::boxed(ferrocx_c::into_handle(c), rank, nranks, dev)
}

/// `ncclCommSplit`: ranks with the same color form a new communicator, ordered
/// by key then rank; `NCCL_SPLIT_NOCOLOR` gives NULL. The new one keeps the
/// parent's device.
///
/// # Safety
/// `comm` a handle of this library; `newcomm` writable; `config` null or an `ncclConfig_t`.
#[no_mangle]
pub unsafe extern "C" fn ncclCommSplit(
    comm: *mut NcclComm,
    color: i32,
    key: i32,
    newcomm: *mut *mut NcclComm,
    config: *const ConfigHead,
) -> i32 {
    call("ncclCommSplit", rank_of(comm), || {
        out(newcomm, "newcomm", std::ptr::null_mut())?;
        check_config(config)?;
        if color < SPLIT_NOCOLOR {
            return Err(Error::InvalidArgument(format!(
                "color {color} (a color is ≥ 0, or NCCL_SPLIT_NOCOLOR)"
            )));
        }
        // SAFETY: the caller's contract.
        let parent = unsafe { ferrocx_c::communicator(handle(comm)?.inner()?) }?;
        if let Some(sub) = parent.split(color, key)? {
            out(newcomm, "newcomm", wrap(sub))?;
        }
        Ok(())
    })
}

/// `ncclCommShrink`: a communicator of the ranks not excluded. ferrocx's
/// shrink keeps the ranks that answer (the survivors agree on who failed), so
/// the excluded ranks must be the ones that failed or left: the result is
/// checked against the list, and a rank that was excluded but answered makes
/// it fail naming it.
///
/// # Safety
/// `comm` a handle of this library; `exclude` `nexclude` ints; `newcomm` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommShrink(
    comm: *mut NcclComm,
    exclude: *const i32,
    nexclude: i32,
    newcomm: *mut *mut NcclComm,
    config: *const ConfigHead,
    _flags: i32,
) -> i32 {
    call("ncclCommShrink", rank_of(comm), || {
        out(newcomm, "newcomm", std::ptr::null_mut())?;
        check_config(config)?;
        let n = usize::try_from(nexclude)
            .map_err(|_| Error::InvalidArgument(format!("excludeRanksCount {nexclude}")))?;
        let excluded: &[i32] = if n == 0 {
            &[]
        } else if exclude.is_null() {
            return Err(Error::InvalidArgument("excludeRanksList is NULL".into()));
        } else {
            // SAFETY: the caller's contract: `n` ints.
            unsafe { std::slice::from_raw_parts(exclude, n) }
        };
        // SAFETY: the caller's contract.
        let parent = unsafe { ferrocx_c::communicator(handle(comm)?.inner()?) }?;
        if excluded.contains(&(parent.rank() as i32)) {
            return Err(Error::InvalidArgument(format!(
                "rank {} is in its own exclude list (excluded ranks do not call ncclCommShrink)",
                parent.rank()
            )));
        }
        let sub = parent.shrink()?;
        let want = parent.nranks() - excluded.len();
        if sub.nranks() != want {
            let got = sub.nranks();
            let _ = sub.destroy();
            return Err(Error::InvalidArgument(format!(
                "excluding ranks {excluded:?} should leave {want} ranks, but {got} are alive and answered: ferrocx shrinks to the ranks that answer, so exclude exactly the failed ones"
            )));
        }
        out(newcomm, "newcomm", wrap(sub))
    })
}
