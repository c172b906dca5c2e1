//! Plugins as real `.so` files loaded with dlopen: the shm cdylib with the
//! built-ins disabled, the C example plugin, and broken plugins.

use ferrocx::plugin::{PluginSource, Registry};
use ferrocx_tests::{
    assert_all_ok, compile_c_plugin, compile_c_plugin_with, plugin_so, repo_root, run_ranks,
    shm_plugin_so,
};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn shm_loaded_from_its_cdylib_with_builtins_disabled() {
    let so = shm_plugin_so();
    let so_s = so.to_string_lossy().into_owned();
    let outs = run_ranks(
        WORKER,
        3,
        &[
            "pairs",
            "0,1,7,4096,1048579,16777216",
            "--expect-transport",
            "shm",
            "--register",
        ],
        &[
            ("FERROCX_BUILTIN_PLUGINS", "0"),
            ("FERROCX_PLUGINS", &so_s),
            ("FERROCX_TIMEOUT", "60"),
        ],
        LIMIT,
    );
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains(&format!("plugin shm {so_s} loaded")),
            "shm must come from the .so:\n{}",
            o.stdout
        );
        assert!(
            !o.stdout.contains("builtin"),
            "no built-in may be loaded:\n{}",
            o.stdout
        );
    }
}

#[test]
fn c_example_plugin_carries_verified_transfers() {
    let src = repo_root().join("sdk/examples/c-pipe/fx_example_pipe.c");
    let Some(so) = compile_c_plugin(&src, "ferrocx_plugin_cpipe") else {
        return;
    };
    let so_s = so.to_string_lossy().into_owned();
    let outs = run_ranks(
        WORKER,
        2,
        &[
            "pairs",
            "0,1,7,4096,1048579",
            "--expect-transport",
            "c-pipe",
        ],
        &[
            ("FERROCX_PLUGINS", &so_s),
            ("FERROCX_TRANSPORTS", "c-pipe"),
            ("FERROCX_TIMEOUT", "60"),
        ],
        LIMIT,
    );
    assert_all_ok(&outs);
    assert!(
        outs[0]
            .stdout
            .contains(&format!("plugin c-pipe {so_s} loaded")),
        "{}",
        outs[0].stdout
    );
}

#[test]
fn broken_plugins_are_reported_by_file_and_the_others_still_load() {
    let src = repo_root().join("tests/fixtures/bad_plugin.c");
    let Some(bad_version) =
        compile_c_plugin_with(&src, "ferrocx_plugin_badver", &["-DBAD_VERSION"])
    else {
        return;
    };
    let bad_size =
        compile_c_plugin_with(&src, "ferrocx_plugin_badsize", &["-DBAD_SIZE"]).expect("cc");
    let no_symbol =
        compile_c_plugin_with(&src, "ferrocx_plugin_nosym", &["-DNO_SYMBOL"]).expect("cc");
    let good = shm_plugin_so();
    let missing = "/nonexistent/libferrocx_plugin_gone.so".to_string();
    let files: Vec<String> = [&bad_version, &bad_size, &no_symbol, &good]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .chain([missing.clone()])
        .collect();
    let reg = Registry::discover_with(true, &files, &[]);

    let reason = |path: &str| -> String {
        let r = reg
            .report
            .iter()
            .find(|r| r.source == PluginSource::File(path.into()))
            .unwrap_or_else(|| panic!("{path} not in the report"));
        r.skipped
            .clone()
            .unwrap_or_else(|| panic!("{path} should be skipped"))
    };
    let v = reason(&files[0]);
    assert!(
        v.contains(&files[0]) && v.contains("abi_version 99") && v.contains("ABI version 1"),
        "{v}"
    );
    let s = reason(&files[1]);
    assert!(s.contains(&files[1]) && s.contains("struct_size 16"), "{s}");
    let n = reason(&files[2]);
    assert!(
        n.contains(&files[2]) && n.contains("no symbol 'ferrocx_transport_v1'"),
        "{n}"
    );
    let m = reason(&missing);
    assert!(m.contains(&missing) && m.contains("no such file"), "{m}");
    // The good file loaded and replaced the built-in of the same name.
    let shm = reg
        .plugins
        .iter()
        .find(|p| p.name == "shm")
        .expect("shm loaded");
    assert_eq!(shm.source, PluginSource::File(good.clone()));
    // Of the files, only the good one is usable (built-ins such as net-socket load too).
    let from_files = reg
        .plugins
        .iter()
        .filter(|p| matches!(p.source, PluginSource::File(_)))
        .count();
    assert_eq!(from_files, 1, "only the good shm file is usable");
}

#[test]
fn plugin_path_directories_are_scanned() {
    let good = shm_plugin_so();
    let dir = good.parent().expect("dir").to_string_lossy().into_owned();
    let reg = Registry::discover_with(false, &[], &[dir]);
    assert!(
        reg.plugins
            .iter()
            .any(|p| p.name == "shm" && p.source == PluginSource::File(good.clone())),
        "{:?}",
        reg.report
    );
}

#[test]
fn naming_an_unknown_transport_is_an_error() {
    let outs = run_ranks(
        WORKER,
        1,
        &["pairs", "8"],
        &[("FERROCX_TRANSPORTS", "bogus")],
        Duration::from_secs(30),
    );
    let o = &outs[0];
    assert_eq!(o.code, Some(1), "{o:?}");
    // The message lists what was loaded (built-ins, in registration order).
    let loaded = o
        .stdout
        .split("(loaded: ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .unwrap_or("");
    assert!(
        o.stdout.contains("FERROCX_TRANSPORTS names 'bogus'")
            && loaded.split(", ").any(|n| n == "shm")
            && loaded.split(", ").any(|n| n == "net-socket"),
        "{}",
        o.stdout
    );
}

#[test]
fn excluding_every_transport_names_the_unreachable_peer() {
    let outs = run_ranks(
        WORKER,
        2,
        &["pairs", "8"],
        &[
            ("FERROCX_TRANSPORTS", "^shm,net-socket"),
            ("FERROCX_TIMEOUT", "10"),
        ],
        Duration::from_secs(30),
    );
    for o in &outs {
        assert_eq!(o.code, Some(1), "{o:?}");
        assert!(
            o.stdout.contains("no transport can reach rank"),
            "{}",
            o.stdout
        );
    }
}

#[test]
fn ranks_that_disagree_on_a_transport_fail_with_both_sides_named() {
    let outs = run_ranks(
        WORKER,
        2,
        &["oneway"],
        &[
            ("FXTEST_SHM_DISABLE_ON_RANK", "1"),
            ("FERROCX_TIMEOUT", "10"),
            // The message must take a transport, not shm-coll's rings.
            ("FERROCX_SHM_COLL_P2P_BYTES", "0"),
        ],
        Duration::from_secs(30),
    );
    // Rank 0 chooses shm; rank 1's shm declines rank 0, so rank 1 refuses
    // the connection and both report why.
    assert_eq!(outs[1].code, Some(1), "{:?}", outs[1]);
    assert!(
        outs[1]
            .stdout
            .contains("'shm' on rank 1 cannot reach rank 0"),
        "{}",
        outs[1].stdout
    );
    assert_eq!(outs[0].code, Some(1), "{:?}", outs[0]);
    assert!(
        outs[0].stdout.contains("rank 1 refused the connection"),
        "{}",
        outs[0].stdout
    );
}

/// The connection setup goes on in the background once a call announced
/// it: a receiver that posts only after its refusal of the sender's
/// request could have been sent still hears the refusal's own error, not
/// "an earlier failure broke the communicator" (34 of 40 runs before the
/// setup kept its failure for callers that ask after it).
#[test]
fn a_receiver_posting_late_hears_its_own_refusal() {
    let outs = run_ranks(
        WORKER,
        2,
        &["oneway", "late"],
        &[
            ("FXTEST_SHM_DISABLE_ON_RANK", "1"),
            ("FERROCX_TIMEOUT", "10"),
            ("FERROCX_SHM_COLL_P2P_BYTES", "0"),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(outs[1].code, Some(1), "{:?}", outs[1]);
    let out = &outs[1].stdout;
    assert!(out.contains("'shm' on rank 1 cannot reach rank 0"), "{out}");
    assert!(!out.contains("earlier failure"), "{out}");
}

#[test]
fn a_failed_setup_is_reported_to_the_peer_without_waiting_for_the_timeout() {
    let src = repo_root().join("tests/fixtures/bad_plugin.c");
    let Some(so) = compile_c_plugin_with(&src, "ferrocx_plugin_failsetup", &["-DFAILSETUP"]) else {
        return;
    };
    let so_s = so.to_string_lossy().into_owned();
    let start = std::time::Instant::now();
    let outs = run_ranks(
        WORKER,
        2,
        &["oneway"],
        &[
            ("FERROCX_PLUGINS", &so_s),
            ("FERROCX_TRANSPORTS", "failsetup"),
            ("FERROCX_TIMEOUT", "30"),
            // The message must take a transport, not shm-coll's rings.
            ("FERROCX_SHM_COLL_P2P_BYTES", "0"),
        ],
        Duration::from_secs(60),
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}: the receiver waited for the timeout",
        start.elapsed()
    );
    assert_eq!(outs[0].code, Some(1), "{:?}", outs[0]);
    assert!(
        outs[0].stdout.contains(
            "plugin 'failsetup' setup (peer rank 1) failed with SYSTEM: failsetup: no such device"
        ),
        "{}",
        outs[0].stdout
    );
    // A failed setup breaks the communicator: the next send says so at once.
    assert!(
        outs[0]
            .stdout
            .contains("an earlier failure broke the communicator: plugin 'failsetup' setup"),
        "{}",
        outs[0].stdout
    );
    // Rank 1 learns why from rank 0's refusal, or, when it reaches its receive
    // after rank 0's abort notice (a failed setup breaks rank 0's
    // communicator), from that notice: either names rank 0 and the setup.
    assert_eq!(outs[1].code, Some(1), "{:?}", outs[1]);
    let o1 = &outs[1].stdout;
    assert!(
        o1.contains("rank 0 failed: it could not set up its end of the connection")
            || o1.contains(
                "rank 0 failed: it aborted the communicator: plugin 'failsetup' setup (peer rank 1) failed"
            ),
        "{o1}"
    );
}

fn cma_plugin() -> Option<String> {
    compile_c_plugin(
        &repo_root().join("sdk/examples/c-cma/fx_example_cma.c"),
        "ferrocx_plugin_cma",
    )
    .map(|p| p.to_string_lossy().into_owned())
}

/// shm-coll as a `.so` with the built-ins off (the shm transport from its `.so`
/// too): every case of the matrix runs on it and is checked.
#[test]
fn shm_coll_loaded_from_its_cdylib_runs_every_case() {
    let shm = shm_plugin_so().to_string_lossy().into_owned();
    let coll = plugin_so("ferrocx-plugin-shm-coll", "libferrocx_plugin_shm_coll.so")
        .to_string_lossy()
        .into_owned();
    let plugins = format!("{shm}:{coll}");
    let outs = run_ranks(
        WORKER,
        3,
        &[
            "coll-plugin",
            "--expect",
            "shm-coll",
            "--counts",
            "0,1,7,1000",
        ],
        &[
            ("FERROCX_BUILTIN_PLUGINS", "0"),
            ("FERROCX_PLUGINS", &plugins),
            ("FERROCX_TIMEOUT", "60"),
        ],
        LIMIT,
    );
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains("collective plugins: [\"shm-coll\"]")
                && o.stdout.contains("{\"shm-coll\": 800}"),
            "{}",
            o.stdout
        );
    }
}

#[test]
fn c_collective_plugin_runs_the_copy_collectives_on_windows() {
    let Some(so) = cma_plugin() else { return };
    for n in [2, 3] {
        let outs = run_ranks(
            WORKER,
            n,
            &[
                "coll-plugin",
                "--expect",
                "cma",
                "--counts",
                "0,1,7,1000",
                "--cycles",
                "200",
            ],
            // cma alone: shm-coll would take the small host calls.
            &[
                ("FERROCX_PLUGINS", &so),
                ("FERROCX_TIMEOUT", "60"),
                ("FERROCX_COLLECTIVES", "cma"),
            ],
            LIMIT,
        );
        assert_all_ok(&outs);
        for o in &outs {
            assert!(
                o.stdout.contains("collective plugins: [\"cma\"]"),
                "{}",
                o.stdout
            );
            // In-place alltoall is the one case cma declines: the core runs it.
            assert!(
                o.stdout.contains("\"cma\"") && o.stdout.contains("\"core\""),
                "{}",
                o.stdout
            );
        }
    }
}

#[test]
fn collectives_filter_excludes_and_names_unknown_plugins() {
    let Some(so) = cma_plugin() else { return };
    let outs = run_ranks(
        WORKER,
        2,
        &["coll-plugin", "--expect", "core", "--counts", "1,1000"],
        &[
            ("FERROCX_PLUGINS", &so),
            ("FERROCX_COLLECTIVES", "^cma,shm-coll"),
        ],
        LIMIT,
    );
    assert_all_ok(&outs);
    assert!(
        outs[0].stdout.contains("collective plugins: []"),
        "{}",
        outs[0].stdout
    );
    let outs = run_ranks(
        WORKER,
        2,
        &["coll-plugin", "--counts", "1"],
        &[("FERROCX_PLUGINS", &so), ("FERROCX_COLLECTIVES", "nope")],
        LIMIT,
    );
    for o in &outs {
        assert!(!o.ok(), "{}", o.stdout);
        assert!(
            o.stdout.contains("FERROCX_COLLECTIVES names 'nope'") && o.stdout.contains("cma"),
            "{}",
            o.stdout
        );
    }
}

#[test]
fn a_window_of_different_sizes_is_an_error_naming_the_rank() {
    let outs = run_ranks(
        WORKER,
        3,
        &["window-mismatch"],
        &[("FERROCX_TIMEOUT", "30")],
        LIMIT,
    );
    assert_all_ok(&outs);
}

#[test]
fn a_collective_plugin_with_a_wrong_abi_is_skipped_with_the_reason() {
    let Some(so) = compile_c_plugin_with(
        &repo_root().join("sdk/examples/c-cma/fx_example_cma.c"),
        "ferrocx_plugin_cma_badsize",
        &["-Dsizeof(x)=8"],
    ) else {
        return;
    };
    let reg = Registry::discover_with(false, &[so.to_string_lossy().into_owned()], &[]);
    assert!(reg.collectives.is_empty());
    let r = &reg.report[0];
    let why = r.skipped.as_deref().unwrap_or("");
    assert!(
        why.contains("struct_size 8") && why.contains("ferrocx_collective_v1"),
        "{why}"
    );
}

/// The core's device-networking paths between real processes, with the test
/// binaries' `fxtest` plugin (no GPU needed): `devnet_open` picks the plugin
/// `FERROCX_DEVNET` names, a window registered with it cannot be dropped
/// from the communicator until the plugin lets go (the same error on every
/// rank, nothing lost), a registration one rank refuses fails on every rank
/// naming it, and a closed plugin answers `Error::Destroyed`.
#[test]
fn devnet_windows_are_held_refused_alike_and_released() {
    let outs = run_ranks(
        WORKER,
        3,
        &["devnet-fake"],
        &[
            ("FERROCX_DEVNET", "fxtest"),
            ("FXTEST_DEVNET_REFUSE_RANK", "1"),
            ("FERROCX_TIMEOUT", "30"),
        ],
        LIMIT,
    );
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains(
                "is still registered with 1 device-networking plugin(s); deregister it there first"
            ),
            "rank {}: {}",
            o.rank,
            o.stdout
        );
    }
    assert!(
        outs[1].stdout.contains("rank 1 refuses 8 KiB windows"),
        "{}",
        outs[1].stdout
    );
    for r in [0, 2] {
        assert!(
            outs[r]
                .stdout
                .contains("rank(s) [1] could not register the window with 'fxtest'"),
            "rank {r}: {}",
            outs[r].stdout
        );
    }
}

/// Without `FERROCX_DEVNET`, `devnet_open` tries every plugin in turn: on
/// ranks without a GPU both the test binaries' `fxtest` (not asked for) and
/// ibgda (no GPU) decline, and the error gives each one's reason.
#[test]
fn devnet_open_tries_every_plugin_and_says_why_each_declined() {
    let outs = run_ranks(
        WORKER,
        2,
        &["devnet-none"],
        &[("FERROCX_DEVICE", "-1"), ("FERROCX_TIMEOUT", "30")],
        LIMIT,
    );
    assert_all_ok(&outs);
    for o in &outs {
        let r = o.rank;
        for needle in [
            "NONE ",
            "device-networking plugin 'fxtest': comm_init: fxtest serves only when FERROCX_DEVNET=fxtest",
            &format!("device-networking plugin 'ibgda': comm_init: rank {r} has no GPU"),
        ] {
            assert!(o.stdout.contains(needle), "rank {r}: missing '{needle}': {}", o.stdout);
        }
    }
}

/// The selection table (`Communicator::collective_choice`, what `fxinfo`
/// prints) names each winner's path: shm-coll's own words through its `.so`'s
/// `describe` hook for small calls, the core's algorithm for large ones, which
/// `FERROCX_ALGO` moves where it applies (recursive doubling is all_reduce's
/// alone).
#[test]
fn the_selection_table_names_each_path() {
    let shm = shm_plugin_so().to_string_lossy().into_owned();
    let coll = plugin_so("ferrocx-plugin-shm-coll", "libferrocx_plugin_shm_coll.so")
        .to_string_lossy()
        .into_owned();
    let plugins = format!("{shm}:{coll}");
    for (algo, all_reduce) in [("", "ring"), ("rd", "rd")] {
        let big = format!("all_reduce/16777216=core: {all_reduce}");
        let outs = run_ranks(
            WORKER,
            2,
            &[
                "selection",
                "all_reduce/8=shm-coll: mailboxes",
                "alltoall/4096=shm-coll: mailboxes",
                &big,
                "all_gather/16777216=core: ring",
                "broadcast/67108864=core: direct",
                "alltoall/4194304=core: pairwise",
            ],
            &[
                ("FERROCX_BUILTIN_PLUGINS", "0"),
                ("FERROCX_PLUGINS", &plugins),
                ("FERROCX_ALGO", algo),
                ("FERROCX_TIMEOUT", "60"),
            ],
            LIMIT,
        );
        assert_all_ok(&outs);
    }
}
