//! The transport through its generated C table on a machine without RDMA hardware:
//! `init` succeeds and says why nothing is offered (info level), `can_connect` answers 0,
//! the other hooks return errors, nothing panics.

use ferrocx_net_ib::config::Config;
use ferrocx_net_ib::topo::Sysfs;
use ferrocx_net_ib::{device, NetIb};
use ferrocx_sdk::abi::*;
use ferrocx_sdk::{Host, Transport};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

static LOG: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn log(_ctx: *mut c_void, level: i32, msg: *const c_char) {
    // SAFETY: the SDK passes a NUL-terminated message.
    let s = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    LOG.lock().unwrap().push((level, s));
}

fn host_table(abort: &std::sync::atomic::AtomicU32) -> FxHostV1 {
    FxHostV1 {
        abi_version: FX_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxHostV1>() as u32,
        host_ctx: std::ptr::null_mut(),
        log: Some(log),
        getenv: None,
        timeout_ms: 5000,
        abort_flag: abort,
    }
}

fn peer(rank: i32, host_hash: u64) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.host_hash = host_hash;
    p
}

#[test]
fn without_rdma_init_reports_at_info_and_can_connect_is_zero() {
    if let Ok(devs) = device::list() {
        eprintln!("skipped: this machine has RDMA devices ({devs:?})");
        return;
    }
    let table = ferrocx_sdk::transport_table::<NetIb>();
    assert_eq!(table.abi_version, FX_ABI_VERSION_1);
    // SAFETY: the name is NUL-terminated by the SDK.
    let name = unsafe { CStr::from_ptr(table.name.as_ptr()) };
    assert_eq!(name.to_str().unwrap(), "net-ib");
    let abort = std::sync::atomic::AtomicU32::new(0);
    let host = host_table(&abort);
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid host table and out-pointer; every hook below gets the context made here.
    unsafe {
        assert_eq!((table.init.unwrap())(&host, &mut ctx), FX_OK);
        assert!(!ctx.is_null());
        let (a, b, c) = (peer(0, 1), peer(1, 2), peer(1, 1));
        assert_eq!((table.can_connect.unwrap())(ctx, &a, &b), 0, "other host");
        assert_eq!((table.can_connect.unwrap())(ctx, &a, &c), 0, "same host");
        // setup and register refuse cleanly.
        let req = FxConnReq {
            me: a,
            peer: b,
            direction: FX_DIR_SEND,
            channel: 0,
            conn_id: 1,
        };
        let mut conn: *mut c_void = std::ptr::null_mut();
        let mut blob = FxBlob::new();
        assert_eq!(
            (table.setup.unwrap())(ctx, &req, &mut conn, &mut blob),
            FX_UNSUPPORTED
        );
        assert!(conn.is_null());
        let mut buf = [0u8; 64];
        let mut mh: *mut c_void = std::ptr::null_mut();
        let rc = (table.reg.unwrap())(
            ctx,
            buf.as_mut_ptr() as *mut c_void,
            64,
            FX_MEM_HOST,
            &mut mh,
            &mut blob,
        );
        assert_eq!(rc, FX_UNSUPPORTED);
        assert_eq!((table.finalize.unwrap())(ctx), FX_OK);
    }
    let log = LOG.lock().unwrap().clone();
    let said = log
        .iter()
        .find(|(_, m)| m.starts_with("net-ib:") && m.contains("will not be offered"))
        .unwrap_or_else(|| panic!("no info line in {log:?}"));
    assert_eq!(said.0, FX_LOG_INFO, "{said:?}");
    assert!(
        said.1.contains("no RDMA device") || said.1.contains("no ACTIVE port"),
        "{said:?}"
    );
}

#[test]
fn disabled_context_offers_nothing() {
    let cfg = Config {
        disabled: true,
        ..Config::default()
    };
    let t = NetIb::with_config(
        // SAFETY: a null table is valid: no logger, process environment.
        unsafe { Host::from_raw(std::ptr::null()) },
        cfg,
        &Sysfs::system(),
    )
    .unwrap();
    assert!(!t.available());
    assert!(t.why_unavailable().contains("FERROCX_IB_DISABLE"));
    assert_eq!(t.can_connect(&peer(0, 1), &peer(1, 2)), 0);
}

#[test]
fn bad_configuration_fails_init_with_the_variable_named() {
    let cfg = Config::from_lookup(|n| (n == "FERROCX_IB_HCA").then(|| "mlx5_0:zero".into()));
    let e = cfg.unwrap_err();
    assert!(e.message().contains("FERROCX_IB_HCA"), "{e}");
}
