//! The ABI's descriptors parsed into checked Rust values.

use crate::abi::*;
use crate::error::{PluginError, PluginResult};
use crate::transport::MemKind;

/// A collective a plugin may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coll {
    /// `FX_COLL_BROADCAST`.
    Broadcast,
    /// `FX_COLL_REDUCE`.
    Reduce,
    /// `FX_COLL_ALL_GATHER`.
    AllGather,
    /// `FX_COLL_REDUCE_SCATTER`.
    ReduceScatter,
    /// `FX_COLL_ALL_REDUCE`.
    AllReduce,
    /// `FX_COLL_ALL_TO_ALL`.
    AllToAll,
    /// `FX_COLL_GATHER`.
    Gather,
    /// `FX_COLL_SCATTER`.
    Scatter,
}

impl Coll {
    /// Every collective, in ABI order.
    pub const ALL: [Coll; 8] = [
        Coll::Broadcast,
        Coll::Reduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllReduce,
        Coll::AllToAll,
        Coll::Gather,
        Coll::Scatter,
    ];

    /// From the ABI number.
    #[inline]
    pub fn from_raw(raw: i32) -> PluginResult<Self> {
        usize::try_from(raw)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
            .ok_or_else(|| PluginError::invalid(format!("unknown collective {raw}")))
    }

    /// The ABI number.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// The core's collective (which reduce, which are rooted: the fields a
    /// call check compares).
    pub fn kind(self) -> ferrocx_algo::CollKind {
        use ferrocx_algo::CollKind as K;
        match self {
            Coll::Broadcast => K::Broadcast,
            Coll::Reduce => K::Reduce,
            Coll::AllGather => K::AllGather,
            Coll::ReduceScatter => K::ReduceScatter,
            Coll::AllReduce => K::AllReduce,
            Coll::AllToAll => K::AllToAll,
            Coll::Gather => K::Gather,
            Coll::Scatter => K::Scatter,
        }
    }

    /// NCCL's name, as fxperf prints it.
    pub fn name(self) -> &'static str {
        match self {
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllReduce => "all_reduce",
            Coll::AllToAll => "alltoall",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
        }
    }

    /// Bytes of (send, receive) buffer at `rank` for `bytes` per block
    /// (NCCL's layouts; 0 where the rank does not use it).
    pub fn buffer_bytes(
        self,
        bytes: usize,
        nranks: usize,
        rank: usize,
        root: usize,
    ) -> (usize, usize) {
        let all = bytes * nranks;
        let at_root = |b: usize| if rank == root { b } else { 0 };
        match self {
            Coll::Broadcast => (at_root(bytes), bytes),
            Coll::Reduce => (bytes, at_root(bytes)),
            Coll::AllGather => (bytes, all),
            Coll::ReduceScatter => (all, bytes),
            Coll::AllReduce => (bytes, bytes),
            Coll::AllToAll => (all, all),
            Coll::Gather => (bytes, at_root(all)),
            Coll::Scatter => (at_root(all), bytes),
        }
    }
}

/// Bytes of one element of `FX_TYPE_*` `dtype`, or `None` for an unknown type.
#[inline]
pub fn elem_bytes(dtype: i32) -> Option<usize> {
    Some(match dtype {
        FX_TYPE_I8 | FX_TYPE_U8 | FX_TYPE_F8E4M3 | FX_TYPE_F8E5M2 => 1,
        FX_TYPE_F16 | FX_TYPE_BF16 => 2,
        FX_TYPE_I32 | FX_TYPE_U32 | FX_TYPE_F32 => 4,
        FX_TYPE_I64 | FX_TYPE_U64 | FX_TYPE_F64 => 8,
        _ => return None,
    })
}

/// A window of this plugin named by a descriptor: its handle and the offset
/// of the buffer in it.
pub struct WindowRef<'a, W> {
    /// What `window_register` returned.
    pub win: &'a W,
    /// Bytes from the window's base.
    pub offset: u64,
}

/// One collective call, checked.
pub struct CollDesc<'a, W> {
    /// The collective.
    pub coll: Coll,
    /// `FX_TYPE_*`.
    pub dtype: i32,
    /// Bytes per element.
    pub elem: usize,
    /// `FX_OP_*`.
    pub op: i32,
    /// Root (0 for unrooted collectives).
    pub root: usize,
    /// Elements, as NCCL counts them.
    pub count: usize,
    /// Memory kind of both buffers.
    pub mem: MemKind,
    /// NCCL's in-place layout.
    pub in_place: bool,
    /// The stream is being captured into a CUDA graph.
    pub capturing: bool,
    /// This rank's send buffer (null where it sends nothing).
    pub send: *const u8,
    /// This rank's receive buffer (null where it receives nothing).
    pub recv: *mut u8,
    /// The send buffer's window, when it lies in one of this plugin's.
    pub send_win: Option<WindowRef<'a, W>>,
    /// The receive buffer's window.
    pub recv_win: Option<WindowRef<'a, W>>,
    /// Collective sequence number, equal on every rank.
    pub seq: u64,
}

impl<W> CollDesc<'_, W> {
    /// Parse a raw descriptor.
    ///
    /// # Safety
    /// Window handles the flags name must be `Box<W>` pointers made by this
    /// plugin and alive for `'a`.
    ///
    /// Inlined: built out of line, the descriptor came back through memory
    /// and its first reads (wider than the stores that wrote it) waited for
    /// those stores — a stall on every host call (a sixth of a 1-rank
    /// broadcast's time, session 35).
    #[inline(always)]
    pub unsafe fn from_raw<'a>(raw: &FxCollDesc) -> PluginResult<CollDesc<'a, W>> {
        let elem = elem_bytes(raw.dtype)
            .ok_or_else(|| PluginError::invalid(format!("unknown data type {}", raw.dtype)))?;
        let win = |flag: u32, h: *mut std::ffi::c_void, offset: u64| {
            if raw.flags & flag == 0 {
                return Ok(None);
            }
            // SAFETY: the caller's contract.
            let w = unsafe { (h as *const W).as_ref() }
                .ok_or_else(|| PluginError::invalid("window flag set but the handle is null"))?;
            Ok(Some(WindowRef { win: w, offset }))
        };
        Ok(CollDesc {
            coll: Coll::from_raw(raw.coll)?,
            dtype: raw.dtype,
            elem,
            op: raw.op,
            root: usize::try_from(raw.root)
                .map_err(|_| PluginError::invalid(format!("negative root {}", raw.root)))?,
            count: usize::try_from(raw.count)
                .map_err(|_| PluginError::invalid("count exceeds the address space"))?,
            mem: MemKind::from_raw(raw.mem_kind)?,
            in_place: raw.flags & FX_COLL_IN_PLACE != 0,
            capturing: raw.flags & FX_COLL_CAPTURING != 0,
            send: raw.send as *const u8,
            recv: raw.recv as *mut u8,
            send_win: win(FX_COLL_SEND_WINDOW, raw.send_win, raw.send_offset)?,
            recv_win: win(FX_COLL_RECV_WINDOW, raw.recv_win, raw.recv_offset)?,
            seq: raw.seq,
        })
    }

    /// Bytes of one rank's block (`count` elements; `usize::MAX` if that overflows).
    pub fn block_bytes(&self) -> usize {
        self.count.saturating_mul(self.elem)
    }
}

/// What `comm_init` learns, copied out of the call.
#[derive(Clone)]
pub struct CommInfo {
    /// This rank.
    pub rank: usize,
    /// Ranks in the communicator.
    pub nranks: usize,
    /// Rank among those of this host.
    pub local_rank: usize,
    /// This rank's CUDA device, if any.
    pub cuda_device: Option<i32>,
    /// Equal on every rank.
    pub comm_hash: u64,
    /// Every rank.
    pub peers: Vec<FxPeerInfo>,
}

impl CommInfo {
    /// Copy a raw record.
    ///
    /// # Safety
    /// `raw.peers` must point to `raw.nranks` records.
    pub unsafe fn from_raw(raw: &FxCommInfo) -> PluginResult<Self> {
        let n = usize::try_from(raw.nranks)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| PluginError::invalid(format!("nranks {}", raw.nranks)))?;
        let rank = usize::try_from(raw.rank)
            .ok()
            .filter(|&r| r < n)
            .ok_or_else(|| PluginError::invalid(format!("rank {} of {n}", raw.rank)))?;
        if raw.peers.is_null() {
            return Err(PluginError::invalid("peers is null"));
        }
        // SAFETY: the caller's contract.
        let peers = unsafe { std::slice::from_raw_parts(raw.peers, n) }.to_vec();
        Ok(CommInfo {
            rank,
            nranks: n,
            local_rank: raw.local_rank.max(0) as usize,
            cuda_device: (raw.cuda_device >= 0).then_some(raw.cuda_device),
            comm_hash: raw.comm_hash,
            peers,
        })
    }

    /// Whether every rank runs on this rank's host.
    pub fn single_host(&self) -> bool {
        let me = self.peers[self.rank].host_hash;
        self.peers.iter().all(|p| p.host_hash == me)
    }
}

/// A symmetric window, copied out of `window_register`.
#[derive(Clone, Debug)]
pub struct WindowDesc {
    /// This rank's window.
    pub base: u64,
    /// Bytes, the same on every rank.
    pub bytes: u64,
    /// Its memory kind.
    pub mem: MemKind,
    /// Rank r's window mapped into this process (0 = not mapped).
    pub peer_bases: Vec<u64>,
    /// Rank r's window in its own process.
    pub peer_addrs: Vec<u64>,
}

impl WindowDesc {
    /// Copy a raw descriptor.
    ///
    /// # Safety
    /// Both arrays must hold `nranks` entries.
    pub unsafe fn from_raw(raw: &FxWindowDesc, nranks: usize) -> PluginResult<Self> {
        if raw.base.is_null() || raw.peer_bases.is_null() || raw.peer_addrs.is_null() {
            return Err(PluginError::invalid("window base or peer arrays are null"));
        }
        // SAFETY: the caller's contract.
        let (bases, addrs) = unsafe {
            (
                std::slice::from_raw_parts(raw.peer_bases, nranks),
                std::slice::from_raw_parts(raw.peer_addrs, nranks),
            )
        };
        Ok(WindowDesc {
            base: raw.base as u64,
            bytes: raw.bytes,
            mem: MemKind::from_raw(raw.mem_kind)?,
            peer_bases: bases.iter().map(|&p| p as u64).collect(),
            peer_addrs: addrs.to_vec(),
        })
    }
}
