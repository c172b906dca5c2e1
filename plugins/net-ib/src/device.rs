//! Verbs devices through `sideway`: listing, opening, port and GID queries, and the
//! [`Registrar`] of a protection domain.
//!
//! `sideway`'s sys crate dlopens `libibverbs.so.1` when the plugin is loaded; without it
//! (or without any RDMA device) listing fails or is empty, and [`list`] says why in
//! words, so `init` can report it at info level and offer nothing. `sideway` panics on
//! enum values it does not know (a newer provider's port state, say): every query here
//! runs under `catch_unwind` and turns that into an error.

use crate::mr_cache::Registrar;
use ferrocx_sdk::{PluginError, PluginResult};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

fn guarded<T>(what: &str, f: impl FnOnce() -> PluginResult<T>) -> PluginResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(PluginError::internal(format!(
            "net-ib: {what}: sideway panicked: {why}"
        )))
    })
}

/// Names of the verbs devices, or why there are none usable (no libibverbs, no
/// kernel support, empty list).
pub fn list() -> Result<Vec<String>, String> {
    let r = guarded("listing RDMA devices", || {
        DeviceList::new()
            .map(|l| l.iter().map(|d| d.name()).collect::<Vec<_>>())
            .map_err(|e| {
                let io = match &e.0 {
                    sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) => io.to_string(),
                    #[allow(unreachable_patterns)]
                    _ => e.to_string(),
                };
                PluginError::unsupported(io)
            })
    });
    match r {
        Ok(v) if v.is_empty() => Err("libibverbs lists no RDMA device".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!(
            "no RDMA device usable (ibv_get_device_list: {}; is rdma-core's libibverbs.so.1 installed and an RDMA driver loaded?)",
            e.message()
        )),
    }
}

/// Attributes of one port, as verbs reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttrs {
    /// State is ACTIVE.
    pub active: bool,
    /// LID.
    pub lid: u16,
    /// Active MTU, verbs enum value (1 = 256 … 5 = 4096).
    pub mtu: u8,
    /// True on RoCE.
    pub ethernet: bool,
}

/// An open device with one protection domain.
pub struct Device {
    /// Device name.
    pub name: String,
    /// Its context.
    pub ctx: Arc<DeviceContext>,
    /// Its protection domain (every QP and MR of the plugin context on this device).
    pub pd: Arc<ProtectionDomain>,
}

impl Device {
    /// Open device `name` and allocate a protection domain.
    pub fn open(name: &str) -> PluginResult<Device> {
        guarded(&format!("opening {name}"), || {
            let list = DeviceList::new().map_err(|e| {
                PluginError::new(
                    ferrocx_sdk::abi::FX_SYSTEM,
                    format!("net-ib: listing devices to open {name}: {e}"),
                )
            })?;
            let dev = list.iter().find(|d| d.name() == name).ok_or_else(|| {
                PluginError::invalid(format!("net-ib: RDMA device {name} not found"))
            })?;
            let ctx = dev.open().map_err(|e| {
                PluginError::new(
                    ferrocx_sdk::abi::FX_SYSTEM,
                    format!("net-ib: opening {name}: {e:?}"),
                )
            })?;
            let pd = ctx.alloc_pd().map_err(|e| {
                PluginError::new(
                    ferrocx_sdk::abi::FX_SYSTEM,
                    format!("net-ib: protection domain on {name}: {e:?}"),
                )
            })?;
            Ok(Device {
                name: name.to_owned(),
                ctx,
                pd,
            })
        })
    }

    /// Query `port`.
    pub fn port(&self, port: u8) -> PluginResult<PortAttrs> {
        guarded(&format!("querying {}:{port}", self.name), || {
            let a = self.ctx.query_port(port).map_err(|e| {
                PluginError::new(
                    ferrocx_sdk::abi::FX_SYSTEM,
                    format!("net-ib: query of port {}:{port}: {e:?}", self.name),
                )
            })?;
            Ok(PortAttrs {
                active: a.port_state() == PortState::Active,
                lid: a.lid(),
                mtu: a.active_mtu() as u32 as u8,
                ethernet: a.link_layer() == LinkLayer::Ethernet,
            })
        })
    }

    /// GID `index` of `port`.
    pub fn gid(&self, port: u8, index: u8) -> PluginResult<[u8; 16]> {
        guarded(&format!("reading a GID of {}:{port}", self.name), || {
            self.ctx
                .query_gid(port, index as u32)
                .map(|g| g.raw)
                .map_err(|e| {
                    PluginError::new(
                        ferrocx_sdk::abi::FX_SYSTEM,
                        format!("net-ib: GID {index} of {}:{port}: {e:?}", self.name),
                    )
                })
        })
    }
}

/// Registers host memory with one protection domain.
pub struct PdRegistrar {
    /// Device name (for errors).
    pub dev: String,
    /// The protection domain.
    pub pd: Arc<ProtectionDomain>,
}

/// Access rights of every registration: the peer writes and reads it.
pub fn access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

impl Registrar for PdRegistrar {
    type Mr = Arc<MemoryRegion>;

    unsafe fn register(&self, addr: usize, len: usize) -> PluginResult<Arc<MemoryRegion>> {
        // SAFETY: the caller guarantees the range is mapped memory of this process that
        // stays mapped while the registration lives (Registrar::register's contract).
        unsafe { self.pd.reg_mr(addr, len, access()) }.map_err(|e| {
            PluginError::new(
                ferrocx_sdk::abi::FX_SYSTEM,
                format!(
                    "net-ib: ibv_reg_mr of {len} bytes at {addr:#x} on {}: {e:?} (RLIMIT_MEMLOCK too low?)",
                    self.dev
                ),
            )
        })
    }
}
