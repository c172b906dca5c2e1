//! C and C++ programs against an installed API (the C API, the NCCL drop-in):
//! install once per test binary with the repository's script, compile with the
//! system compiler. Skipped (with a note) where no compiler exists.

use crate::repo_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `scripts/<script> PREFIX` into a fresh temporary prefix named after
/// `tag` (release build in target/fx-plugins, shared with the plugin builds);
/// `None` without a C compiler. Call it from a test binary's own `OnceLock`.
pub fn install(script: &str, tag: &str) -> Option<PathBuf> {
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("skipped: no C compiler (cc)");
        return None;
    }
    let root = repo_root();
    let prefix = std::env::temp_dir().join(format!("fx-{tag}-{}", std::process::id()));
    let st = Command::new(root.join("scripts").join(script))
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", root.join("target/fx-plugins"))
        .status()
        .unwrap_or_else(|e| panic!("run scripts/{script}: {e}"));
    assert!(st.success(), "{script} failed");
    Some(prefix)
}

/// Compile `src` into `out` with `compiler` (`cc`, `c++`), warnings as errors,
/// then `flags`. `false` when the compiler is missing; a failed build panics.
pub fn compile(compiler: &str, std: &str, src: &Path, out: &Path, flags: &[String]) -> bool {
    let st = Command::new(compiler)
        .args([std, "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .args(flags)
        .status();
    match st {
        Ok(s) => {
            assert!(s.success(), "{compiler} {} failed", src.display());
            true
        }
        Err(e) => {
            eprintln!("skipped: no {compiler}: {e}");
            false
        }
    }
}
