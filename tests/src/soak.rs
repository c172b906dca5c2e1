//! The test side of the soak scenarios (`a2a-soak`, `mixed-soak`): a scratch
//! directory where ranks write how many iterations they verified and their logs
//! (`FERROCX_DEBUG_FILE=DIR/log.%p`), and where the test drops a stop file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A soak's scratch directory (removed on drop unless the test failed).
pub struct SoakDir {
    path: PathBuf,
}

impl SoakDir {
    /// A fresh directory for the test `tag` of this process.
    pub fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!("fxtest-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create scratch dir");
        SoakDir { path }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The environment a soak rank needs: the directory, logging into it (`info`,
    /// or `FXTEST_SOAK_DEBUG`),
    /// and the given rail timing.
    pub fn env(&self, rail_timeout: &str, recovery: &str) -> Vec<(String, String)> {
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        vec![
            kv("FXTEST_SOAK_DIR", &self.path.display().to_string()),
            kv(
                "FERROCX_DEBUG",
                &std::env::var("FXTEST_SOAK_DEBUG").unwrap_or_else(|_| "info".into()),
            ),
            kv(
                "FERROCX_DEBUG_FILE",
                &self.path.join("log.%p").display().to_string(),
            ),
            kv("FERROCX_SOCKET_RAIL_TIMEOUT", rail_timeout),
            kv("FERROCX_SOCKET_RECOVERY", recovery),
            kv("FERROCX_TIMEOUT", "60"),
        ]
    }

    /// Verified iterations of `rank` so far.
    pub fn iters(&self, rank: usize) -> u64 {
        std::fs::read_to_string(self.path.join(format!("iter.{rank}")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Iterations every one of `nranks` ranks has verified.
    pub fn all_iters(&self, nranks: usize) -> u64 {
        (0..nranks).map(|r| self.iters(r)).min().unwrap_or(0)
    }

    /// Every rank's log so far.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for e in std::fs::read_dir(&self.path)
            .expect("read scratch dir")
            .flatten()
        {
            if e.file_name().to_string_lossy().starts_with("log.") {
                all += &std::fs::read_to_string(e.path()).unwrap_or_default();
            }
        }
        all
    }

    /// Ask the ranks to finish (after their minimum iterations).
    pub fn stop(&self) {
        std::fs::write(self.path.join("stop"), "").expect("stop file");
    }

    /// Wait until `cond` holds, at most `limit`, or panic saying what was awaited
    /// (with the progress of both ranks and the logs).
    pub fn wait_for(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < limit,
                "waited {limit:?} for {what}; iterations {} / {}; logs:\n{}",
                self.iters(0),
                self.iters(1),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SoakDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
