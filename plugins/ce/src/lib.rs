//! The ce collective plugin (being written).

use ferrocx_sdk::collective::{CollDesc, Collective, CommInfo, Oob};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::ffi::c_void;

/// The plugin context.
pub struct Ce;

impl Collective for Ce {
    type Comm = ();
    type Window = ();
    const NAME: &'static str = "ce";
    const CAPS: u64 = 0;
    fn init(_host: Host) -> PluginResult<Self> {
        Ok(Ce)
    }
    fn comm_init(&self, _info: &CommInfo, _oob: Oob) -> PluginResult<()> {
        Err(PluginError::unsupported("not yet"))
    }
    fn can_run(&self, _comm: &(), _coll: &CollDesc<'_, ()>) -> i32 {
        0
    }
    unsafe fn launch(&self, _c: &mut (), _d: &CollDesc<'_, ()>, _s: *mut c_void) -> PluginResult<()> {
        Err(PluginError::unsupported("not yet"))
    }
}
