//! Symmetric windows on [`Communicator`] (see [`crate::window`]), and what
//! the collective plugins would do with a call.

use super::dispatch::Call;
use super::Communicator;
use crate::collective::Choice;
use crate::error::{Error, Result};
use crate::plan::CollSpec;
use crate::window::{Local, Window};
use ferrocx_sdk::abi::{FX_MEM_CUDA, FX_MEM_HOST};

impl Communicator {
    /// Register `buf` as a symmetric window (collective: every rank calls it
    /// with the same size, in the same order). Collectives whose buffers lie
    /// in windows may run on a collective plugin that needs them.
    pub fn window_register(&self, buf: &mut [u8]) -> Result<Window> {
        self.check_live()?;
        let local = if buf.is_empty() {
            Err(Error::invalid("window_register: the buffer is empty"))
        } else {
            Ok(Local::host(buf.as_mut_ptr() as u64, buf.len()))
        };
        self.windows.register(&self.shared, &self.colls, local)
    }

    /// Register `len` bytes of device memory at `ptr` as a symmetric window
    /// (collective; peers on this host map it through CUDA IPC).
    ///
    /// # Safety
    /// The memory must stay allocated until the window is deregistered on every rank.
    pub unsafe fn window_register_device(&self, ptr: u64, len: usize) -> Result<Window> {
        self.check_live()?;
        // ferrocx's own driver calls are never part of the user's capture.
        let _relaxed = ferrocx_sdk::cuda::RelaxedCapture::enter();
        let local = (|| {
            if len == 0 {
                return Err(Error::invalid("window_register: the buffer is empty"));
            }
            let gpu = self.gpu()?;
            Local::device(gpu.device(), ptr, len)
        })();
        self.windows.register(&self.shared, &self.colls, local)
    }

    /// Release a window (collective). When it returns on a rank, no peer maps
    /// that rank's memory any more.
    pub fn window_deregister(&self, w: Window) -> Result<()> {
        self.check_live()?;
        // ferrocx's own driver calls are never part of the user's capture.
        let _relaxed = ferrocx_sdk::cuda::RelaxedCapture::enter();
        self.windows.deregister(&self.shared, &self.colls, w)
    }

    /// Windows registered now (leak checks).
    pub fn window_count(&self) -> usize {
        self.windows.count()
    }

    /// Names of the collective plugins taking part in this communicator's calls.
    pub fn collective_plugins(&self) -> Vec<String> {
        self.colls
            .plugins()
            .iter()
            .map(|p| p.name().to_string())
            .collect()
    }

    /// Who would run this collective on these buffers (host memory, or device
    /// memory when `device`), with every candidate's priority — what `fxinfo`
    /// prints. Asks the plugins; runs nothing.
    pub fn collective_choice(
        &self,
        spec: &CollSpec,
        send: u64,
        recv: u64,
        in_place: bool,
        device: bool,
    ) -> Result<Choice> {
        self.check_live()?;
        let call = Call {
            spec,
            send,
            recv,
            in_place,
            mem: if device { FX_MEM_CUDA } else { FX_MEM_HOST },
            capturing: false,
            seq: self.shared.status.colls_begun(),
        };
        Ok(self.choose(&call))
    }
}

impl Communicator {
    /// Open a device-networking plugin on this communicator (collective):
    /// the one `FERROCX_DEVNET` names, else the first, in discovery order, that
    /// serves it (the built-in `ibgda` where there is a GPU). Kernels then post
    /// puts, signals and fetch-adds through the plugin's device header, with
    /// [`DevNet::device_view`](crate::devnet::DevNet::device_view) as their
    /// handle. `Error::Unsupported` says why the plugins cannot serve this
    /// communicator (no GPU, a peer on another host for the proxy handler).
    pub fn devnet_open(&self) -> Result<crate::devnet::DevNet> {
        self.check_live()?;
        let want = crate::devnet::chosen_from_env();
        let libs: Vec<_> = match &want {
            Some(name) => self
                .devnet_libs
                .iter()
                .filter(|l| &l.name == name)
                .collect(),
            None => self.devnet_libs.iter().collect(),
        };
        if libs.is_empty() {
            let found: Vec<&str> = self.devnet_libs.iter().map(|l| l.name.as_str()).collect();
            return Err(Error::Unsupported(format!(
                "no device-networking plugin{} is loaded (loaded: {})",
                want.map(|w| format!(" named '{w}' (FERROCX_DEVNET)"))
                    .unwrap_or_default(),
                if found.is_empty() {
                    "none".into()
                } else {
                    found.join(", ")
                }
            )));
        }
        // A plugin's comm_init agrees across ranks, so every rank moves on to
        // the next plugin alike.
        let mut declined = Vec::new();
        for lib in libs {
            match crate::devnet::DevNet::open(lib.clone(), &self.shared) {
                Err(Error::Unsupported(why)) => declined.push(why),
                r => return r,
            }
        }
        Err(Error::Unsupported(declined.join("; ")))
    }

    /// Offer window `w` to an open device-networking plugin (collective): the
    /// number kernels name it by. Deregister it there
    /// ([`DevNet::window_deregister`](crate::devnet::DevNet::window_deregister))
    /// before the window itself.
    pub fn devnet_window_register(&self, dn: &crate::devnet::DevNet, w: &Window) -> Result<u32> {
        self.check_live()?;
        let entry = self.windows.entry(w).ok_or_else(|| {
            Error::invalid(format!(
                "devnet_window_register: window at {:#x} ({} B) is not registered",
                w.base(),
                w.bytes()
            ))
        })?;
        dn.register(entry)
    }
}
