//! Making the queues GPU-visible: the pages holding the send queues, CQs and
//! doorbell records (host memory libmlx5 allocated) are registered with
//! CUDA, device-mapped, and so is each UAR page (`CU_MEMHOSTREGISTER_IOMEMORY`:
//! the NIC's doorbell registers); windows are registered on each path's
//! protection domain through dma-buf, or as peer memory where dma-buf is
//! refused. [`plan`] and [`Spans::device`] are the sans-IO half: libmlx5
//! packs several QPs' doorbell records (and QPs share UAR pages) into one
//! page, and CUDA refuses to register a page twice, so ranges are merged
//! into whole pages first.

use super::queues::{reg_dmabuf_mr, reg_mr, Mr, Port};
use ferrocx_sdk::cuda::{check, sys};
use std::ffi::c_void;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

/// Host page bytes (registrations are whole pages): 4 KiB on x86-64, 4 or
/// 64 KiB on aarch64 (GH200).
pub fn page() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Merge `ranges` (start, bytes) into sorted, disjoint runs of whole pages.
pub fn plan(ranges: &[(u64, u64)], page: u64) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|&&(_, len)| len > 0)
        .map(|&(at, len)| {
            let start = at / page * page;
            let end = (at + len).div_ceil(page) * page;
            (start, end)
        })
        .collect();
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// Registered runs: host start, bytes, device start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spans(pub Vec<(u64, u64, u64)>);

impl Spans {
    /// The device address of host address `at`, if a run holds it.
    pub fn device(&self, at: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(s, len, _)| at >= s && at - s < len)
            .map(|&(s, _, d)| d + (at - s))
    }
}

/// Host pages registered with CUDA and mapped for the bound device;
/// unregistered on drop (those this value registered).
pub struct HostMap {
    spans: Spans,
    /// Host starts this value registered (others were registered already).
    owned: Vec<u64>,
}

impl HostMap {
    /// Register the pages of `ranges`; `io` for device registers (UAR pages).
    /// The caller bound a CUDA context.
    pub fn register(ranges: &[(u64, u64)], io: bool) -> Result<HostMap, String> {
        let mut m = HostMap {
            spans: Spans::default(),
            owned: Vec::new(),
        };
        let mut flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        if io {
            flags |= sys::CU_MEMHOSTREGISTER_IOMEMORY;
        }
        let what = if io { "a UAR page" } else { "queue memory" };
        let page = page();
        for (start, len) in plan(ranges, page) {
            match m.register_run(start, len, flags, what)? {
                true => {}
                // Part of the run was registered before (by someone else, who
                // may have covered only some of it): page by page, each
                // translated on its own.
                false => {
                    for at in (start..start + len).step_by(page as usize) {
                        m.register_run(at, page, flags, what)?;
                    }
                }
            }
        }
        Ok(m)
    }

    /// Register one run and record where it is for the GPU; `false` (and
    /// nothing recorded) where CUDA says some of it is registered already,
    /// except for a single page, which is then translated as it is.
    fn register_run(
        &mut self,
        start: u64,
        len: u64,
        flags: u32,
        what: &str,
    ) -> Result<bool, String> {
        let p = start as *mut c_void;
        // SAFETY: whole pages of live mappings (libmlx5's queue buffers or
        // its mmap of the UAR), kept until this map is dropped, which the
        // caller orders before the QPs and CQs are destroyed.
        let r = unsafe { sys::cuMemHostRegister_v2(p, len as usize, flags) };
        let already = r == sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        if already && len > page() {
            return Ok(false);
        }
        if !already {
            check(r, "cuMemHostRegister")
                .map_err(|e| format!("{what}, {len} bytes at {start:#x}: {}", e.message()))?;
            self.owned.push(start);
        }
        let mut dev = 0;
        // SAFETY: registered (here or before) with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
        check(r, "cuMemHostGetDevicePointer")
            .map_err(|e| format!("{what} at {start:#x}: {}", e.message()))?;
        self.spans.0.push((start, len, dev));
        Ok(true)
    }

    /// Where the registered runs are for the GPU.
    pub fn spans(&self) -> &Spans {
        &self.spans
    }
}

impl Drop for HostMap {
    fn drop(&mut self) {
        for &s in &self.owned {
            // SAFETY: registered in `register`, unregistered once.
            unsafe { sys::cuMemHostUnregister(s as *mut c_void) };
        }
    }
}

/// How a window was registered on a NIC, for `describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// Host memory (`ibv_reg_mr`).
    Host,
    /// Device memory through a dma-buf.
    DmaBuf,
    /// Device memory as peer memory (nvidia-peermem): dma-buf was refused (why).
    PeerMemory(String),
}

impl std::fmt::Display for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registered::Host => write!(f, "host memory"),
            Registered::DmaBuf => write!(f, "dma-buf"),
            Registered::PeerMemory(why) => write!(f, "peer memory (dma-buf refused: {why})"),
        }
    }
}

/// A dma-buf fd for the device allocation holding `addr .. + len` and the
/// offset of `addr` in it.
fn dmabuf(addr: u64, len: u64) -> Result<(OwnedFd, u64), String> {
    let span = ferrocx_sdk::cuda::device_span(addr as usize)
        .ok_or_else(|| format!("{addr:#x} is not device memory"))?;
    let base = span.base as u64;
    let size = (span.size as u64).div_ceil(page()) * page();
    if addr + len > base + span.size as u64 {
        return Err(format!(
            "{len} bytes at {addr:#x} run past their allocation"
        ));
    }
    let mut fd: i32 = -1;
    // SAFETY: a live device allocation, page-aligned (cuMemAlloc) and its size
    // rounded to pages; `fd` is a valid out pointer for an int.
    let r = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast(),
            base,
            size as usize,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    check(r, "cuMemGetHandleForAddressRange").map_err(|e| e.message().to_string())?;
    // SAFETY: a new fd the driver gave this process, owned from here on.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, addr - base))
}

/// Register a window on `port`: host memory directly; device memory by
/// dma-buf, else as peer memory (`ibv_reg_mr` on the device address, which
/// needs nvidia-peermem), saying why dma-buf was refused.
pub fn register_window(
    port: &Arc<Port>,
    addr: u64,
    len: u64,
    device: bool,
) -> Result<(Mr, Registered), String> {
    if !device {
        return reg_mr(port, addr, len).map(|m| (m, Registered::Host));
    }
    let refused = match dmabuf(addr, len) {
        Ok((fd, offset)) => {
            use std::os::fd::AsRawFd;
            // The MR holds its own reference to the buffer: `fd` closes after.
            match reg_dmabuf_mr(port, fd.as_raw_fd(), offset, len, addr) {
                Ok(m) => return Ok((m, Registered::DmaBuf)),
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    reg_mr(port, addr, len)
        .map(|m| (m, Registered::PeerMemory(refused.clone())))
        .map_err(|e| format!("dma-buf: {refused}; peer memory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    #[test]
    fn ranges_merge_into_whole_disjoint_pages() {
        // Two doorbell records in one page, a queue spanning two pages, a
        // range touching the next page, an empty one.
        let got = plan(
            &[
                (0x1_0040, 8),
                (0x1_0080, 8),
                (0x3_0000, 0x2000),
                (0x2_0ff8, 16),
                (0x9_0000, 0),
            ],
            PAGE,
        );
        assert_eq!(
            got,
            vec![(0x1_0000, 0x1000), (0x2_0000, 0x2000), (0x3_0000, 0x2000)]
        );
        // Overlapping and nested ranges, any order.
        let got = plan(&[(0x5000, 0x3000), (0x4000, 0x1001), (0x6000, 8)], PAGE);
        assert_eq!(got, vec![(0x4000, 0x4000)]);
        assert!(plan(&[], PAGE).is_empty());
    }

    #[test]
    fn host_addresses_translate_inside_their_run_only() {
        let s = Spans(vec![
            (0x1_0000, 0x2000, 0x7f00_0000),
            (0x5_0000, 0x1000, 0x7f10_0000),
        ]);
        assert_eq!(s.device(0x1_0000), Some(0x7f00_0000));
        assert_eq!(s.device(0x1_1ff8), Some(0x7f00_1ff8));
        assert_eq!(s.device(0x5_0804), Some(0x7f10_0804));
        assert_eq!(s.device(0x1_2000), None);
        assert_eq!(s.device(0xffff), None);
    }
}
