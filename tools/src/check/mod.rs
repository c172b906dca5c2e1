//! The conformance kit behind `fxinfo --check PLUGIN.so`: loads a plugin and
//! runs the ABI battery against it, with a second process as the peer.
//!
//! Checks: load (version, size, name, required hooks), lifecycle (init and
//! finalize twice), can_connect for a same-host peer, blob round-trip between
//! two processes (setup → exchange → connect), transfers of 0, 1, 7, 4097,
//! 1 MiB + 3 and 16 MiB + 1 bytes verified byte by byte, 64 requests in
//! flight, a receive smaller than the message, and misuse (null arguments)
//! answered by error codes — run in a separate process so a crash is reported
//! as a failure instead of killing the kit. A collective plugin gets its own
//! battery (`collective.rs`); a library exporting both kinds gets both.

mod child;
mod collective;
pub(crate) mod devnet;
mod peer;
mod report;

pub use peer::child_main;
use report::Report;

use ferrocx::collective::CollectiveLib;
use ferrocx::devnet::DevnetLib;
use ferrocx::plugin::library::open_library;
use ferrocx::plugin::{PluginInstance, PluginLib};
use ferrocx_sdk::abi::{FX_COLL_SYMBOL_V1, FX_DEVNET_SYMBOL_V1, FX_SYMBOL_V1};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

/// Bound for each step of the battery.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// `fxinfo --check PATH`: every kind of table the library exports is checked.
pub fn main(path: &str) -> ExitCode {
    let mut rep = Report::default();
    let p = Path::new(path);
    let lib = match open_library(p) {
        Ok(l) => l,
        Err(e) => {
            rep.fail("load", e.to_string());
            return rep.finish();
        }
    };
    let transport = PluginLib::from_library(&lib, p);
    let collective = CollectiveLib::from_library(&lib, p);
    let devnet = DevnetLib::from_library(&lib, p);
    if transport.is_none() && collective.is_none() && devnet.is_none() {
        rep.fail(
            "load",
            format!(
                "{path}: no symbol '{FX_SYMBOL_V1}', '{FX_COLL_SYMBOL_V1}' or '{FX_DEVNET_SYMBOL_V1}': not a ferrocx plugin"
            ),
        );
        return rep.finish();
    }
    match transport {
        Some(Ok(l)) => {
            let t = l.table();
            rep.pass(
                "load",
                format!(
                    "transport '{}' abi v{} struct_size {} caps {:#x} from {path}",
                    l.name, l.abi_version, t.struct_size, t.caps
                ),
            );
            transport_battery(Arc::new(l), path, &mut rep);
        }
        Some(Err(e)) => rep.fail("load", e.to_string()),
        None => {}
    }
    match collective {
        Some(Ok(l)) => {
            let t = l.table();
            rep.pass(
                "load collective",
                format!(
                    "collective '{}' abi v{} struct_size {} caps {:#x} from {path}",
                    l.name, l.abi_version, t.struct_size, t.caps
                ),
            );
            peer::run_child(path, "collective", "", &mut rep);
        }
        Some(Err(e)) => rep.fail("load collective", e.to_string()),
        None => {}
    }
    match devnet {
        Some(Ok(l)) => {
            let t = l.table();
            rep.pass(
                "load devnet",
                format!(
                    "device networking '{}' abi v{} struct_size {} caps {:#x} from {path}",
                    l.name, l.abi_version, t.struct_size, t.caps
                ),
            );
            peer::run_child(path, "devnet", "", &mut rep);
        }
        Some(Err(e)) => rep.fail("load devnet", e.to_string()),
        None => {}
    }
    rep.finish()
}

fn transport_battery(lib: Arc<PluginLib>, path: &str, rep: &mut Report) {
    let abort = Arc::new(AtomicU32::new(0));
    for round in 1..=2 {
        match PluginInstance::init(lib.clone(), STEP_TIMEOUT, abort.clone()) {
            Ok(inst) => drop(inst), // finalize
            Err(e) => {
                return rep.fail("lifecycle", format!("init round {round}: {e}"));
            }
        }
    }
    rep.pass("lifecycle", "init + finalize, twice".to_string());
    peer::run_pair(&lib, path, rep);
    peer::run_misuse(path, rep);
}
