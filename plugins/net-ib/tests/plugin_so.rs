//! Loads the built `libferrocx_plugin_net_ib.so` the way the core does (dlopen, then
//! the `ferrocx_transport_v1` symbol) and drives init / can_connect / finalize on this
//! machine. Without RDMA hardware the plugin must load, say why it offers nothing, and
//! answer 0. Build the `.so` first (`cargo build -p ferrocx-plugin-net-ib`); CI does,
//! and there a missing `.so` is a failure, elsewhere a skip.

use ferrocx_sdk::abi::*;
use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::sync::Mutex;

static LOG: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn log(_ctx: *mut c_void, level: i32, msg: *const c_char) {
    // SAFETY: the plugin passes a NUL-terminated message.
    let s = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    LOG.lock().unwrap().push((level, s));
}

fn so_path() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FERROCX_NET_IB_SO") {
        return Some(p.into());
    }
    // target/<profile>/deps/<this test> → target/<profile>/
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("libferrocx_plugin_net_ib.so");
    p.exists().then_some(p)
}

#[test]
fn plugin_so_loads_and_declines_without_rdma() {
    let Some(path) = so_path() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "libferrocx_plugin_net_ib.so not built (cargo build -p ferrocx-plugin-net-ib)"
        );
        eprintln!("skipped: libferrocx_plugin_net_ib.so not built");
        return;
    };
    // SAFETY: loading our own plugin; its constructors only dlopen libibverbs.
    let lib = unsafe { libloading::Library::new(&path) }.expect("dlopen the plugin");
    // SAFETY: the symbol has this signature (sdk::export_transport!).
    let table = unsafe {
        let f: libloading::Symbol<extern "C" fn() -> *const FxTransportV1> = lib
            .get(FX_SYMBOL_V1.as_bytes())
            .expect("ferrocx_transport_v1");
        &*f()
    };
    assert_eq!(table.abi_version, FX_ABI_VERSION_1);
    assert_eq!(
        // SAFETY: NUL-terminated by the SDK.
        unsafe { CStr::from_ptr(table.name.as_ptr()) }
            .to_str()
            .unwrap(),
        "net-ib"
    );
    let abort = std::sync::atomic::AtomicU32::new(0);
    let host = FxHostV1 {
        abi_version: FX_ABI_VERSION_1,
        struct_size: std::mem::size_of::<FxHostV1>() as u32,
        host_ctx: std::ptr::null_mut(),
        log: Some(log),
        getenv: None,
        timeout_ms: 5000,
        abort_flag: &abort,
    };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let (mut me, mut them) = (FxPeerInfo::zeroed(), FxPeerInfo::zeroed());
    me.host_hash = 1;
    them.host_hash = 2;
    them.rank = 1;
    // SAFETY: valid table, host and out-pointer; ctx comes from init.
    let score = unsafe {
        assert_eq!((table.init.unwrap())(&host, &mut ctx), FX_OK);
        let s = (table.can_connect.unwrap())(ctx, &me, &them);
        assert_eq!((table.finalize.unwrap())(ctx), FX_OK);
        s
    };
    let log = LOG.lock().unwrap().clone();
    let hw = log.iter().any(|(_, m)| m.starts_with("net-ib: using "));
    if hw {
        assert!(score > 0, "devices found but score 0: {log:?}");
        return;
    }
    assert_eq!(score, 0);
    assert!(
        log.iter()
            .any(|(l, m)| *l == FX_LOG_INFO && m.contains("net-ib will not be offered")),
        "{log:?}"
    );
}
