//! The C API as a user gets it: `scripts/install-capi.sh` into a prefix, C
//! and C++ programs compiled with `pkg-config --cflags --libs ferrocx`, run
//! as 3 real rank processes (every collective checked, send/recv in a group,
//! split, error paths); and the header's constants compiled and compared
//! with the library's.

use ferrocx_c::*;
use ferrocx_tests::{assert_all_ok, cprog, repo_root, run_ranks};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Install once per test binary; `None` without a C compiler.
fn prefix() -> Option<&'static PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| cprog::install("install-capi.sh", "capi"))
        .as_ref()
}

/// `pkg-config --cflags --libs ferrocx` for the prefix (the .pc file read
/// directly where pkg-config is missing).
fn flags(prefix: &Path) -> Vec<String> {
    let pc = prefix.join("lib/pkgconfig");
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "ferrocx"])
        .env("PKG_CONFIG_PATH", &pc)
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).expect("utf-8"),
        _ => {
            eprintln!("pkg-config missing: reading ferrocx.pc directly");
            let p = prefix.display();
            format!("-I{p}/include -L{p}/lib -Wl,-rpath,{p}/lib -lferrocx")
        }
    };
    text.split_whitespace().map(String::from).collect()
}

fn compile(compiler: &str, std: &str, src: &str, out: &Path, prefix: &Path) -> bool {
    let src = repo_root().join("capi/tests/c").join(src);
    cprog::compile(compiler, std, &src, out, &flags(prefix))
}

#[test]
fn c_program_runs_every_collective_split_and_error_paths_on_3_ranks() {
    let Some(prefix) = prefix() else { return };
    let exe = prefix.join("test_api");
    assert!(compile("cc", "-std=c99", "test_api.c", &exe, prefix));
    let outs = run_ranks(
        exe.to_str().unwrap(),
        3,
        &[],
        &[("FERROCX_TIMEOUT", "60")],
        Duration::from_secs(120),
    );
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains(&format!("PASS rank {} of 3", o.rank)),
            "{}",
            o.stdout
        );
    }
}

#[test]
fn cpp_program_uses_the_header() {
    let Some(prefix) = prefix() else { return };
    let exe = prefix.join("test_api_cpp");
    if !compile("c++", "-std=c++11", "test_api.cpp", &exe, prefix) {
        return;
    }
    let outs = run_ranks(
        exe.to_str().unwrap(),
        3,
        &[],
        &[("FERROCX_TIMEOUT", "60")],
        Duration::from_secs(120),
    );
    assert_all_ok(&outs);
    assert!(outs.iter().all(|o| o.stdout.contains("(C++)")));
}

#[test]
fn header_constants_match_the_library() {
    let Some(prefix) = prefix() else { return };
    let checks: Vec<(&str, i64)> = vec![
        ("FERROCX_VERSION_CODE", FERROCX_VERSION_CODE.into()),
        ("FERROCX_UNIQUE_ID_BYTES", FERROCX_UNIQUE_ID_BYTES as i64),
        (
            "sizeof(ferrocx_unique_id_t)",
            FERROCX_UNIQUE_ID_BYTES as i64,
        ),
        ("FERROCX_SPLIT_NOCOLOR", FERROCX_SPLIT_NOCOLOR.into()),
        ("FERROCX_SUCCESS", FERROCX_SUCCESS.into()),
        ("FERROCX_INVALID_ARGUMENT", FERROCX_INVALID_ARGUMENT.into()),
        ("FERROCX_UNSUPPORTED", FERROCX_UNSUPPORTED.into()),
        ("FERROCX_SYSTEM_ERROR", FERROCX_SYSTEM_ERROR.into()),
        ("FERROCX_REMOTE_ERROR", FERROCX_REMOTE_ERROR.into()),
        ("FERROCX_TIMEOUT", FERROCX_TIMEOUT.into()),
        ("FERROCX_DESTROYED", FERROCX_DESTROYED.into()),
        ("FERROCX_INTERNAL_ERROR", FERROCX_INTERNAL_ERROR.into()),
        ("FERROCX_AUTH_ERROR", FERROCX_AUTH_ERROR.into()),
    ];
    // Types and operators are the core's numbering (= the plugin ABI's).
    let mut all = checks;
    let types = [
        "INT8",
        "UINT8",
        "INT32",
        "UINT32",
        "INT64",
        "UINT64",
        "FLOAT16",
        "BFLOAT16",
        "FLOAT32",
        "FLOAT64",
        "FLOAT8E4M3",
        "FLOAT8E5M2",
    ];
    for (name, d) in types.iter().zip(ferrocx::DataType::ALL) {
        all.push((
            Box::leak(format!("FERROCX_{name}").into_boxed_str()),
            d as i64,
        ));
    }
    for (name, o) in ["SUM", "PROD", "MIN", "MAX", "AVG"]
        .iter()
        .zip(ferrocx::RedOp::ALL)
    {
        all.push((
            Box::leak(format!("FERROCX_{name}").into_boxed_str()),
            o as i64,
        ));
    }
    let mut c = String::from("#include <stdio.h>\n#include <ferrocx.h>\nint main(void) {\n");
    for (k, _) in &all {
        c.push_str(&format!("  printf(\"%lld\\n\", (long long)({k}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    let src = prefix.join("consts.c");
    std::fs::write(&src, c).unwrap();
    let exe = prefix.join("consts");
    let st = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(flags(prefix))
        .status()
        .unwrap();
    assert!(st.success());
    let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    let got: Vec<i64> = out.lines().map(|l| l.parse().unwrap()).collect();
    let bad: Vec<String> = all
        .iter()
        .zip(&got)
        .filter(|((_, r), c)| r != *c)
        .map(|((k, r), c)| format!("{k}: C {c}, Rust {r}"))
        .collect();
    assert!(bad.is_empty() && got.len() == all.len(), "{bad:?}");
}
