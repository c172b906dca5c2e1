//! The conformance kit behind `fxinfo --check PLUGIN.so`: loads a plugin and
//! runs the ABI battery against it, with a second process as the peer.
//!
//! Checks: load (version, size, name, required hooks), lifecycle (init and
//! finalize twice), can_connect for a same-host peer, blob round-trip between
//! two processes (setup → exchange → connect), transfers of 0, 1, 7, 4097,
//! 1 MiB + 3 and 16 MiB + 1 bytes verified byte by byte, 64 requests in
//! flight, a receive smaller than the message, and misuse (null arguments)
//! answered by error codes — run in a separate process so a crash is reported
//! as a failure instead of killing the kit.

mod peer;
mod report;

pub use peer::child_main;
use report::Report;

use ferrocx::plugin::{PluginInstance, PluginLib};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

/// Bound for each step of the battery.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// `fxinfo --check PATH`.
pub fn main(path: &str) -> ExitCode {
    let mut rep = Report::default();
    let lib = match PluginLib::load(Path::new(path)) {
        Ok(l) => {
            let t = l.table();
            rep.pass(
                "load",
                format!(
                    "'{}' abi v{} struct_size {} caps {:#x} from {path}",
                    l.name, l.abi_version, t.struct_size, t.caps
                ),
            );
            Arc::new(l)
        }
        Err(e) => {
            rep.fail("load", e.to_string());
            return rep.finish();
        }
    };
    let abort = Arc::new(AtomicU32::new(0));
    let mut lifecycle_ok = true;
    for round in 1..=2 {
        match PluginInstance::init(lib.clone(), STEP_TIMEOUT, abort.clone()) {
            Ok(inst) => drop(inst), // finalize
            Err(e) => {
                rep.fail("lifecycle", format!("init round {round}: {e}"));
                lifecycle_ok = false;
                break;
            }
        }
    }
    if lifecycle_ok {
        rep.pass("lifecycle", "init + finalize, twice".to_string());
    } else {
        return rep.finish();
    }
    peer::run_pair(&lib, path, &mut rep);
    peer::run_misuse(path, &mut rep);
    rep.finish()
}
