//! The NCCL drop-in as a user gets it: `scripts/install-nccl.sh` into a
//! prefix, a C program written against NCCL's API compiled with `-lnccl` and
//! run as 3 real rank processes (every collective and type checked on host
//! buffers, groups, split, PreMulSum, in-process communicators, error paths);
//! every function the header declares is exported; the header compiles as
//! C++ and its numbers match the library's.

use ferrocx_tests::{assert_all_ok, cprog, repo_root, run_ranks};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Install once per test binary; `None` without a C compiler.
fn prefix() -> Option<&'static PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| cprog::install("install-nccl.sh", "nccl"))
        .as_ref()
}

fn link_flags(prefix: &Path) -> Vec<String> {
    let p = prefix.display();
    // FERROCX_NCCL_NO_CUDA: the same header without CUDA's, as on a machine
    // without the toolkit (CI); with it, cudaStream_t comes from CUDA.
    vec![
        format!("-I{p}/include"),
        "-DFERROCX_NCCL_NO_CUDA".into(),
        format!("-L{p}/lib"),
        format!("-Wl,-rpath,{p}/lib"),
        "-lnccl".into(),
    ]
}

fn compile(compiler: &str, std: &str, src: &Path, out: &Path, prefix: &Path) -> bool {
    cprog::compile(compiler, std, src, out, &link_flags(prefix))
}

#[test]
fn nccl_program_runs_every_collective_group_split_and_error_path_on_3_ranks() {
    let Some(prefix) = prefix() else { return };
    let exe = prefix.join("test_nccl");
    let src = repo_root().join("nccl/tests/c/test_nccl.c");
    assert!(compile("cc", "-std=c99", &src, &exe, prefix));
    let outs = run_ranks(
        exe.to_str().unwrap(),
        3,
        &[],
        &[("FERROCX_TIMEOUT", "60"), ("NCCL_DEBUG", "WARN")],
        Duration::from_secs(180),
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

/// The functions `nccl.h` declares (`ncclResult_t name(` / `const char *name(`).
fn declared(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let l = line.trim_start();
        let rest = l
            .strip_prefix("ncclResult_t ")
            .or_else(|| l.strip_prefix("const char *"));
        if let Some(rest) = rest {
            if let Some((name, _)) = rest.split_once('(') {
                if name.starts_with("nccl") {
                    names.push(name.trim().to_string());
                }
            }
        }
    }
    names
}

#[test]
fn every_declared_function_is_exported_and_the_header_is_valid_cpp() {
    let Some(prefix) = prefix() else { return };
    let header = std::fs::read_to_string(prefix.join("include/nccl.h")).unwrap();
    let names = declared(&header);
    assert!(names.len() >= 35, "{names:?}");
    // Taking every function's address makes the linker resolve each one.
    let mut c =
        String::from("#include <nccl.h>\n#include <stdio.h>\nint main(void) {\n  void *f[] = {\n");
    for n in &names {
        c.push_str(&format!("    (void *)&{n},\n"));
    }
    c.push_str("  };\n  printf(\"%d\\n\", (int)(sizeof f / sizeof f[0]));\n  return 0;\n}\n");
    let src = prefix.join("symbols.c");
    std::fs::write(&src, c).unwrap();
    let exe = prefix.join("symbols");
    let st = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wno-pedantic", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(link_flags(prefix))
        .status()
        .unwrap();
    assert!(st.success(), "a declared function is not exported");
    let out = Command::new(&exe).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        names.len().to_string()
    );
    // C++ (nccl-tests and PyTorch are C++): the header alone, then used.
    let cpp = prefix.join("use.cpp");
    std::fs::write(
        &cpp,
        "#include <nccl.h>\nint main() { int v = 0; ncclConfig_t c = NCCL_CONFIG_INITIALIZER; (void)c;\n  return ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE ? 0 : 1; }\n",
    )
    .unwrap();
    if compile("c++", "-std=c++14", &cpp, &prefix.join("use_cpp"), prefix) {
        let st = Command::new(prefix.join("use_cpp")).status().unwrap();
        assert!(
            st.success(),
            "ncclGetVersion differs from NCCL_VERSION_CODE"
        );
    }
}

#[test]
fn the_library_answers_to_nccls_soname() {
    let Some(prefix) = prefix() else { return };
    let so = std::fs::read(prefix.join("lib/libnccl.so.2")).unwrap();
    // The dynamic string table holds the SONAME; a program linked with -lnccl
    // records it as NEEDED, and LD_PRELOAD of this file then satisfies it.
    let needle = b"libnccl.so.2\0";
    assert!(
        so.windows(needle.len()).any(|w| w == needle),
        "no libnccl.so.2 SONAME"
    );
    let exe = prefix.join("soname_probe");
    let src = prefix.join("soname_probe.c");
    std::fs::write(
        &src,
        "#include <nccl.h>\nint main(void) { int v; return ncclGetVersion(&v); }\n",
    )
    .unwrap();
    assert!(compile("cc", "-std=c99", &src, &exe, prefix));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "readelf -d {} 2>/dev/null || objdump -p {}",
            exe.display(),
            exe.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        eprintln!("skipped: neither readelf nor objdump");
        return;
    }
    assert!(
        text.contains("libnccl.so.2"),
        "NEEDED is not libnccl.so.2:\n{text}"
    );
}
