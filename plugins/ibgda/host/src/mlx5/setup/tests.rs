use super::*;
use crate::mlx5::verbs::LIBMLX5;
use ferrocx_sdk::abi::{FxCommOob, FX_OK};
use std::ffi::c_void;

fn ready() -> Outcome {
    Outcome {
        forced: false,
        result: Ok(()),
    }
}

fn failed(why: &str) -> Outcome {
    Outcome {
        forced: false,
        result: Err(why.into()),
    }
}

#[test]
fn outcomes_round_trip_at_one_length_and_long_reasons_are_cut_at_a_character() {
    for o in [
        ready(),
        failed("libmlx5.so.1 not found: libmlx5.so.1: cannot open shared object file"),
        Outcome {
            forced: true,
            result: Err(String::new()),
        },
        Outcome {
            forced: true,
            result: Ok(()),
        },
    ] {
        let b = o.encode();
        assert_eq!(b.len(), OUTCOME_BYTES);
        assert_eq!(Outcome::decode(&b), o);
    }
    // 3-byte characters across the cut: the reason ends on a boundary.
    let long = "é€".repeat(100);
    let d = Outcome::decode(&failed(&long).encode());
    let why = d.result.unwrap_err();
    assert!(why.len() <= REASON_BYTES && long.starts_with(&why), "{why}");
    assert!(why.len() > REASON_BYTES - 3);
    // Short or garbage bytes are a failure, never a panic.
    assert!(Outcome::decode(&[1, 0]).result.is_err());
    let mut g = vec![0xffu8; OUTCOME_BYTES];
    g[0] = 0;
    assert!(Outcome::decode(&g).result.is_err());
}

#[test]
fn the_handler_is_mlx5_only_when_every_rank_is_ready() {
    assert_eq!(choose(&[ready(), ready(), ready()]), Ok(Choice::Mlx5));
    assert_eq!(
        choose(&[
            ready(),
            ready(),
            ready(),
            failed("mlx5dv_init_obj on mlx5_1:1 failed: Invalid argument")
        ]),
        Ok(Choice::Proxy(
            "rank 3: mlx5dv_init_obj on mlx5_1:1 failed: Invalid argument".into()
        ))
    );
    assert_eq!(
        choose(&[
            failed("no RDMA NIC under /sys/class/infiniband: nothing to pair"),
            ready(),
            failed("x"),
            failed("y")
        ]),
        Ok(Choice::Proxy(
            "rank 0: no RDMA NIC under /sys/class/infiniband: nothing to pair (and 2 other ranks)"
                .into()
        ))
    );
    assert_eq!(
        choose(&[failed("FERROCX_IBGDA_HANDLER=proxy"), failed("z")]),
        Ok(Choice::Proxy(
            "rank 0: FERROCX_IBGDA_HANDLER=proxy (and 1 other rank)".into()
        ))
    );
}

#[test]
fn a_forced_mlx5_that_cannot_be_had_is_an_error_on_every_rank() {
    let forced_ready = Outcome {
        forced: true,
        result: Ok(()),
    };
    // Forced and ready everywhere: mlx5.
    assert_eq!(
        choose(&[forced_ready.clone(), forced_ready.clone()]),
        Ok(Choice::Mlx5)
    );
    // Rank 1 forced it, rank 0 lacks the library: every rank gets the error.
    let e = choose(&[failed("libmlx5.so.1 not found: no such file"), forced_ready]).unwrap_err();
    assert_eq!(
        e,
        "FERROCX_IBGDA_HANDLER=mlx5 on rank 1, but the mlx5 handler is unavailable: rank 0: libmlx5.so.1 not found: no such file"
    );
    // A rank that forced the proxy against one that forced mlx5.
    let e = choose(&[
        failed("FERROCX_IBGDA_HANDLER=proxy"),
        Outcome {
            forced: true,
            result: Err("no backup port".into()),
        },
    ])
    .unwrap_err();
    assert!(
        e.contains("on rank 1")
            && e.ends_with("rank 0: FERROCX_IBGDA_HANDLER=proxy (and 1 other rank)"),
        "{e}"
    );
}

/// A one-rank all-gather: `mine` is everyone's.
unsafe extern "C" fn gather1(
    _: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> i32 {
    // SAFETY: the Oob contract: `mine` readable and `all` writable for len bytes (one rank).
    unsafe { std::ptr::copy_nonoverlapping(mine.cast::<u8>(), all.cast::<u8>(), len) };
    FX_OK
}

unsafe extern "C" fn barrier1(_: *mut c_void) -> i32 {
    FX_OK
}

fn cfg(handler: &str) -> Config {
    Config::from_env(&|n: &str| (n == "FERROCX_IBGDA_HANDLER").then(|| handler.to_string()))
        .unwrap()
}

/// The bring-up on one rank with libraries that do not exist (a real
/// dlopen failing): the choice says so and falls back to the proxy; forced,
/// it is an error saying the same; `proxy` asks for nothing.
#[test]
fn without_rdma_core_the_bring_up_falls_back_to_the_proxy_saying_why() {
    let raw = FxCommOob {
        oob_ctx: std::ptr::null_mut(),
        all_gather: Some(gather1),
        barrier: Some(barrier1),
    };
    // SAFETY: static callbacks, valid for the test.
    let oob = unsafe { Oob::from_raw(&raw, 1) };
    let words = [0u64; 8];
    let signals = (words.as_ptr() as u64, 64);
    let absent = || Verbs::load_from("libibverbs-absent.so.1", LIBMLX5).map(Arc::new);
    let missing = absent().err().expect("no such library");
    assert!(
        missing.starts_with("libibverbs-absent.so.1 not found: "),
        "{missing}"
    );
    let up = |handler: &str, gpu| bring_up_with(absent, 0, 1, &cfg(handler), gpu, signals, &oob);
    match up("auto", Some("0000:00:00.0")).unwrap() {
        Brought::Proxy(why) => assert_eq!(why, format!("rank 0: {missing}")),
        Brought::Up(_) => panic!("mlx5 came up without rdma-core"),
    }
    let e = up("mlx5", Some("0000:00:00.0")).err().unwrap();
    assert_eq!(
        e.message(),
        format!("FERROCX_IBGDA_HANDLER=mlx5 on rank 0, but the mlx5 handler is unavailable: rank 0: {missing}")
    );
    match bring_up(0, 1, &cfg("proxy"), None, signals, &oob).unwrap() {
        Brought::Proxy(why) => assert_eq!(why, "rank 0: FERROCX_IBGDA_HANDLER=proxy"),
        Brought::Up(_) => panic!("proxy asked for"),
    }
    // The real libraries where they load: a GPU on no PCI tree of this
    // machine has no ports to pair, and the reason says so.
    if Verbs::shared().is_ok() {
        match bring_up(0, 1, &cfg("auto"), Some("0000:ff:1f.7"), signals, &oob).unwrap() {
            Brought::Proxy(why) => assert!(why.starts_with("rank 0: "), "{why}"),
            Brought::Up(_) => panic!("mlx5 came up for a GPU that is not there"),
        }
    }
}

/// The window record of the registration all-gather: what one rank writes
/// is what the others read; short or missing bytes read as no window.
#[test]
fn window_records_round_trip_per_path() {
    let rec = window_record(0x7f00_1234_5000, &[0x11, 0x2233_4455]);
    assert_eq!(rec.len(), WINDOW_RECORD_BYTES);
    let k = window_keys(&rec);
    assert_eq!(
        k,
        [
            WindowKey {
                addr: 0x7f00_1234_5000,
                rkey: 0x11
            },
            WindowKey {
                addr: 0x7f00_1234_5000,
                rkey: 0x2233_4455
            }
        ]
    );
    // A rank whose backup path failed sends only its primary.
    let half = window_keys(&window_record(0x9000, &[7]));
    assert_eq!((half[0].rkey, half[1]), (7, WindowKey::default()));
    assert_eq!(window_keys(&rec[..20])[1], WindowKey::default());
    assert_eq!(window_keys(&[])[0], WindowKey::default());
}
