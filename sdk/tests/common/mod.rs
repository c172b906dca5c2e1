//! Helpers shared by the tests that build C code: finding the compiler,
//! private temporary directories, compiling.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The C compiler as a program plus leading arguments (`CC` may be `"ccache gcc"`).
pub struct CCompiler {
    program: String,
    args: Vec<String>,
}

impl CCompiler {
    /// `$CC` (default `cc`), or `None` when it cannot be run.
    pub fn find() -> Option<CCompiler> {
        let spec = std::env::var("CC")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "cc".into());
        let mut words = spec.split_whitespace().map(String::from);
        let program = words.next()?;
        let cc = CCompiler {
            program,
            args: words.collect(),
        };
        let ok = cc
            .command()
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        ok.then_some(cc)
    }

    /// A command running the compiler with its leading arguments.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        c
    }

    /// Run the compiler with `args`; panics with its diagnostics on failure.
    pub fn run(&self, args: &[&str]) {
        let out = self
            .command()
            .args(args)
            .output()
            .expect("running the C compiler");
        assert!(
            out.status.success(),
            "C compiler failed: {} {} {}\n{}{}",
            self.program,
            self.args.join(" "),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Print the skip notice used when no compiler exists.
pub fn skip_no_compiler(test: &str) {
    eprintln!("{test}: skipped: no C compiler (set CC)");
}

/// A directory under the system temp dir, unique per process and call, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Create `$TMPDIR/ferrocx-<tag>-<pid>-<nanos>-<n>`.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ferrocx-{tag}-{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a temporary directory");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `sdk/include`, where `ferrocx_plugin.h` lives.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}
