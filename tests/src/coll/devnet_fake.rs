//! A device-networking plugin for machines without a GPU, `fxtest`: it serves
//! any communicator when `FERROCX_DEVNET=fxtest` asks for it (it declines
//! otherwise, so the GPU tests' default still finds ibgda), numbers every
//! window it is given, and refuses windows of 8 KiB on the rank
//! `FXTEST_DEVNET_REFUSE_RANK` names. Its view is a host address. It is a
//! built-in of the test binaries, so the core's devnet paths (open, window
//! registration agreed across ranks, the hold on a window, close) run between
//! real processes on CI.

use super::e2s;
use ferrocx::{Communicator, Error};
use ferrocx_sdk::abi::{FxDevnetStats, FX_DEVNET_CAP_CUDA_MEM, FX_DEVNET_CAP_HOST_MEM};
use ferrocx_sdk::collective::{CommInfo, Oob, WindowDesc};
use ferrocx_sdk::devnet::DevNet;
use ferrocx_sdk::{Host, PluginError, PluginResult};

/// The plugin context.
pub struct FakeDevnet {
    host: Host,
}

/// One communicator's side.
pub struct FakeComm {
    rank: usize,
    windows: Vec<Option<u64>>,
    view: Box<[u64; 4]>,
}

impl DevNet for FakeDevnet {
    type Comm = FakeComm;
    const NAME: &'static str = "fxtest";
    const CAPS: u64 = FX_DEVNET_CAP_HOST_MEM | FX_DEVNET_CAP_CUDA_MEM;

    fn init(host: Host) -> PluginResult<Self> {
        Ok(FakeDevnet { host })
    }

    fn comm_init(&self, info: &CommInfo, _oob: Oob) -> PluginResult<FakeComm> {
        // Only when asked for: the test binaries carry ibgda too, which the
        // GPU tests open by default.
        if self.host.env("FERROCX_DEVNET").as_deref() != Some("fxtest") {
            return Err(PluginError::unsupported(
                "fxtest serves only when FERROCX_DEVNET=fxtest",
            ));
        }
        Ok(FakeComm {
            rank: info.rank,
            windows: Vec::new(),
            view: Box::new([info.rank as u64, info.nranks as u64, 0, 0]),
        })
    }

    fn window_register(&self, comm: &mut FakeComm, desc: &WindowDesc) -> PluginResult<u32> {
        let refuse = self
            .host
            .env("FXTEST_DEVNET_REFUSE_RANK")
            .and_then(|r| r.parse::<usize>().ok());
        if desc.bytes == 8192 && refuse == Some(comm.rank) {
            return Err(PluginError::unsupported(format!(
                "rank {} refuses 8 KiB windows (FXTEST_DEVNET_REFUSE_RANK)",
                comm.rank
            )));
        }
        comm.windows.push(Some(desc.bytes));
        Ok((comm.windows.len() - 1) as u32)
    }

    fn window_deregister(&self, comm: &mut FakeComm, id: u32) -> PluginResult<()> {
        match comm.windows.get_mut(id as usize) {
            Some(w @ Some(_)) => {
                *w = None;
                Ok(())
            }
            _ => Err(PluginError::invalid(format!(
                "window {id} is not registered"
            ))),
        }
    }

    fn device_view(&self, comm: &FakeComm) -> PluginResult<u64> {
        Ok(comm.view.as_ptr() as u64)
    }

    fn stats(&self, _comm: &FakeComm) -> FxDevnetStats {
        FxDevnetStats::default()
    }

    fn describe(&self, comm: &FakeComm) -> String {
        let live = comm.windows.iter().flatten().count();
        format!("fxtest devnet on rank {}: {live} window(s)", comm.rank)
    }
}

ferrocx_sdk::register_builtin_devnet!(FakeDevnet);

/// `devnet-fake`: the core's devnet paths with the `fxtest` plugin
/// (`FERROCX_DEVNET=fxtest`). With `FXTEST_DEVNET_REFUSE_RANK=r`, an 8 KiB
/// window registration fails on every rank, naming r.
pub fn run() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    let mut buf = vec![0u8; 4096];
    let w = comm.window_register(&mut buf).map_err(e2s)?;
    let dn = comm.devnet_open().map_err(e2s)?;
    if dn.name() != "fxtest" || dn.device_view().map_err(e2s)? == 0 {
        return Err(format!(
            "rank {me}: opened '{}', view {:?}",
            dn.name(),
            dn.device_view()
        ));
    }
    let id = comm.devnet_window_register(&dn, &w).map_err(e2s)?;
    let d = dn.describe();
    if id != 0 || !d.contains(&format!("fxtest devnet on rank {me}: 1 window(s)")) {
        return Err(format!("rank {me}: window {id}, describe '{d}'"));
    }
    // The core keeps the window while the plugin holds it, on every rank.
    let held = match comm.window_deregister(w) {
        Err(Error::InvalidArgument(m))
            if m.contains("still registered with 1 device-networking plugin(s)") =>
        {
            m
        }
        other => return Err(format!("rank {me}: dropping a held window gave {other:?}")),
    };
    dn.window_deregister(id).map_err(e2s)?;
    comm.window_deregister(w).map_err(e2s)?;
    let mut refused = String::new();
    if let Ok(r) = std::env::var("FXTEST_DEVNET_REFUSE_RANK") {
        let mut big = vec![0u8; 8192];
        let w2 = comm.window_register(&mut big).map_err(e2s)?;
        refused = match comm.devnet_window_register(&dn, &w2) {
            Err(e) if me.to_string() == r && e.to_string().contains("refuses 8 KiB windows") => {
                e.to_string()
            }
            Err(e)
                if e.to_string()
                    .contains(&format!("rank(s) [{r}] could not register")) =>
            {
                e.to_string()
            }
            other => {
                return Err(format!(
                    "rank {me}: a window rank {r} refuses gave {other:?}"
                ))
            }
        };
        // Nothing of it is held anywhere: the window goes.
        comm.window_deregister(w2).map_err(e2s)?;
    }
    dn.close().map_err(e2s)?;
    match dn.device_view() {
        Err(Error::Destroyed(_)) => {}
        other => {
            return Err(format!(
                "rank {me}: the view of a closed devnet gave {other:?}"
            ))
        }
    }
    Ok(format!("rank {me}: HELD {held} REFUSED {refused}"))
}

/// `devnet-none` (ranks without a GPU, `FERROCX_DEVNET` unset): every plugin
/// declines, and the error says why for each.
pub fn none() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    match comm.devnet_open() {
        Err(Error::Unsupported(why)) => Ok(format!("NONE {why}")),
        Ok(dn) => Err(format!("rank {}: '{}' opened", comm.rank(), dn.name())),
        Err(e) => Err(format!("rank {}: {e}", comm.rank())),
    }
}
