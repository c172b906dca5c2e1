//! fxinfo: the plugin report, and the conformance kit against real `.so` files.

use ferrocx_tests::{compile_c_plugin, compile_c_plugin_with, plugin_so, repo_root, shm_plugin_so};
use std::process::Command;

const FXINFO: &str = env!("CARGO_BIN_EXE_fxinfo");

fn check(path: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(FXINFO)
        .arg("--check")
        .arg(path)
        .output()
        .expect("run fxinfo");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `fxinfo --check` on `so` passes, and its report holds every needle.
fn passes_check(so: &std::path::Path, needles: &[&str]) {
    let (code, out) = check(so);
    assert_eq!(code, Some(0), "{out}");
    for needle in needles {
        assert!(out.contains(needle), "missing '{needle}':\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn conformance_kit_passes_the_shm_plugin() {
    let (code, out) = check(&shm_plugin_so());
    assert_eq!(code, Some(0), "{out}");
    for name in [
        "load",
        "lifecycle",
        "blob round-trip",
        "transfer 0 B",
        "transfer 16777217 B",
        "requests in flight",
        "receive too small",
        "misuse isend(null conn)",
    ] {
        assert!(
            out.contains(&format!("PASS  {name}")),
            "missing PASS {name}:\n{out}"
        );
    }
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn conformance_kit_passes_the_c_example_plugin() {
    let Some(so) = compile_c_plugin(
        &repo_root().join("sdk/examples/c-pipe/fx_example_pipe.c"),
        "ferrocx_plugin_cpipe_check",
    ) else {
        return;
    };
    let (code, out) = check(&so);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("PASS  transfer 1048579 B")
            && out.contains("check: ")
            && !out.contains("FAIL"),
        "{out}"
    );
}

#[test]
fn conformance_kit_accepts_an_empty_blob() {
    // len 0 is legal for a setup blob; the kit once lost the trailing space of
    // "BLOB " between its processes and failed such plugins with "no blob from the kit".
    let Some(so) = compile_c_plugin_with(
        &repo_root().join("sdk/examples/c-pipe/fx_example_pipe.c"),
        "ferrocx_plugin_cpipe_empty_blob",
        &["-DCPIPE_EMPTY_SEND_BLOB"],
    ) else {
        return;
    };
    let (code, out) = check(&so);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("PASS  blob round-trip") && out.contains("PASS  transfer 1048579 B"),
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn conformance_kit_reports_a_crashing_plugin_and_keeps_going() {
    let Some(so) = compile_c_plugin_with(
        &repo_root().join("tests/fixtures/bad_plugin.c"),
        "ferrocx_plugin_crashy",
        &["-DCRASHY"],
    ) else {
        return;
    };
    let (code, out) = check(&so);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL  misuse isend(null conn)") && out.contains("crashed"),
        "{out}"
    );
    assert!(out.contains("PASS  load"), "{out}");
}

#[test]
fn conformance_kit_rejects_a_wrong_abi_naming_the_file() {
    let Some(so) = compile_c_plugin_with(
        &repo_root().join("tests/fixtures/bad_plugin.c"),
        "ferrocx_plugin_badver_check",
        &["-DBAD_VERSION"],
    ) else {
        return;
    };
    let (code, out) = check(&so);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL  load")
            && out.contains(&so.to_string_lossy().into_owned())
            && out.contains("abi_version 99"),
        "{out}"
    );
}

#[test]
fn plugin_report_lists_builtins_and_skipped_files() {
    let out = Command::new(FXINFO)
        .env("FERROCX_PLUGINS", "/nonexistent/libferrocx_plugin_x.so")
        .env("FERROCX_SECRET", "do-not-print-me")
        .env_remove("FERROCX_RANK")
        .output()
        .expect("run fxinfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("shm") && text.contains("builtin") && text.contains("loaded"),
        "{text}"
    );
    assert!(
        text.contains("/nonexistent/libferrocx_plugin_x.so") && text.contains("skipped"),
        "{text}"
    );
    assert!(text.contains("FERROCX_TIMEOUT"), "{text}");
    // The job secret is listed, never shown.
    assert!(
        text.contains("FERROCX_SECRET") && text.contains("(15 bytes, hidden)"),
        "{text}"
    );
    assert!(!text.contains("do-not-print-me"), "{text}");
}

#[test]
fn fxinfo_under_fxrun_says_who_runs_each_collective_and_why() {
    let Some(so) = compile_c_plugin(
        &repo_root().join("sdk/examples/c-cma/fx_example_cma.c"),
        "ferrocx_plugin_cma_fxinfo",
    ) else {
        return;
    };
    let fxinfo = |shm_coll: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_fxrun"))
            .args(["-n", "2", "--", FXINFO])
            .env("FERROCX_PLUGINS", &so)
            .env("FERROCX_SHM_COLL_PRIORITY", shm_coll)
            .env_remove("FERROCX_COLLECTIVES")
            .output()
            .expect("run fxrun fxinfo");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        text
    };
    // cma against the core alone (shm-coll sits out at priority 0).
    let text = fxinfo("0");
    for needle in [
        "cma          collective",
        "collective plugins taking part: cma",
        // cma has no describe hook: named alone; the core names its algorithm.
        "all_gather      host windows  cma (cma 150 ≥ core 100)",
        "all_gather      host buffers  core: direct (core 100 ≥ cma 0)",
        "all_reduce      host windows  core: rd (core 100 ≥ cma 0)",
    ] {
        assert!(text.contains(needle), "missing '{needle}':\n{text}");
    }
    // By default shm-coll takes the host calls up to 256 KiB blocks (the 8 B, 4 KiB
    // and 256 KiB buckets) and leaves the larger ones to the core's ring.
    let text = fxinfo("150");
    for needle in [
        "collective plugins taking part: shm-coll, cma",
        "all_reduce      host buffers  shm-coll: mailboxes (shm-coll 150 ≥ core 100, cma 0) | shm-coll: mailboxes (shm-coll 150 ≥ core 100, cma 0) | shm-coll: mailboxes (shm-coll 150 ≥ core 100, cma 0) | core: ring (core 100 ≥ shm-coll 0, cma 0)",
    ] {
        assert!(text.contains(needle), "missing '{needle}':\n{text}");
    }
}

#[test]
fn conformance_kit_passes_the_shm_coll_plugin() {
    let so = plugin_so("ferrocx-plugin-shm-coll", "libferrocx_plugin_shm_coll.so");
    passes_check(
        &so,
        &[
            "PASS  load collective        collective 'shm-coll'",
            "PASS  comm_init",
            // Every collective, on host memory.
            "ran and verified on host memory: [0, 1, 2, 3, 4, 5, 6, 7]",
            "PASS  comm_destroy",
        ],
    );
}

#[test]
fn conformance_kit_recognises_and_passes_a_c_collective_plugin() {
    let Some(so) = compile_c_plugin(
        &repo_root().join("sdk/examples/c-cma/fx_example_cma.c"),
        "ferrocx_plugin_cma_check",
    ) else {
        return;
    };
    passes_check(
        &so,
        &[
            "PASS  load collective        collective 'cma'",
            "PASS  comm_init",
            "ran and verified on host memory: [0, 2, 5, 6, 7]",
            "PASS  launch(null comm)",
            "PASS  comm_destroy",
        ],
    );
}

/// The ibgda `.so` exports only `ferrocx_devnet_v1`: the kit recognises the
/// kind and runs its battery. Without a GPU its comm_init must decline with
/// the reason; with one, the view, status, stats and describe of a one-rank
/// comm are checked. Null handles are refused with codes either way.
#[test]
fn conformance_kit_recognises_and_passes_the_ibgda_devnet_plugin() {
    let so = plugin_so("ferrocx-plugin-ibgda", "libferrocx_plugin_ibgda.so");
    let gpu = ferrocx_sdk::cuda::available().is_ok_and(|n| n > 0);
    let mut needles = vec![
        "PASS  load devnet            device networking 'ibgda' abi v1",
        "PASS  devnet lifecycle",
        "PASS  devnet misuse",
    ];
    if gpu {
        needles.extend([
            "PASS  devnet view",
            "PASS  devnet status and stats",
            "PASS  devnet describe",
        ]);
    } else {
        needles.push(
            "PASS  devnet comm_init       declined with a reason: comm_init: rank 0 has no GPU",
        );
    }
    passes_check(&so, &needles);
}

/// Through the core, between real rank processes: `devnet_open` finds the
/// built-in ibgda and reports, as `Error::Unsupported`, why it cannot serve
/// ranks without a GPU; a `FERROCX_DEVNET` that names nothing loaded is an
/// error naming what is loaded. `fxinfo` prints the same.
#[test]
fn devnet_open_says_why_it_cannot_serve_and_fxinfo_prints_it() {
    let run = |devnet: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fxrun"));
        c.args(["-n", "2", "--", FXINFO])
            .env("FERROCX_DEVICE", "-1");
        match devnet {
            Some(d) => c.env("FERROCX_DEVNET", d),
            None => c.env_remove("FERROCX_DEVNET"),
        };
        let out = c.output().expect("run fxrun fxinfo");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        text
    };
    let text = run(None);
    assert!(
        text.contains("device networking (kernels posting puts and signals")
            && text.contains(
                "not available: unsupported: device-networking plugin 'ibgda': comm_init: rank 0 has no GPU"
            ),
        "{text}"
    );
    let text = run(Some("nope"));
    assert!(
        text.contains(
            "no device-networking plugin named 'nope' (FERROCX_DEVNET) is loaded (loaded: ibgda)"
        ),
        "{text}"
    );
}
