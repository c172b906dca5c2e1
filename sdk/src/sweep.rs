//! Removal of shared-memory objects left behind by processes that died.
//!
//! A connection segment is unlinked as soon as both ends mapped it, so a name
//! in /dev/shm only survives when its creator died between `setup` and the
//! sender attaching; stand-in device buffers (tests) survive a killed test
//! process. Names carry the creator's pid right after their prefix
//! (`ferrocx-shm-<pid>-…`, `ferrocx-p2p-<pid>-…`, `ferrocx-fakegpu-<pid>-…`),
//! and the creator holds the liveness lock on byte 0 ([`Region::create`]).
//! An object is removed when that lock is free **and** its pid does not exist
//! here: a live creator in another pid namespace still holds its lock, and a
//! creator between `shm_open` and its lock still has its pid.

use crate::proc::pid_alive;
use crate::region::{unlink_name, Region};
use std::path::Path;

/// Directory where POSIX shared memory objects appear.
pub const SHM_DIR: &str = "/dev/shm";

/// The lock byte an object's creator holds.
const CREATOR_BYTE: i64 = 0;

/// The creator pid of an object name (without the leading '/') starting with
/// `prefix` (also without the '/'), e.g. `ferrocx-shm-`.
pub fn creator_pid(file_name: &str, prefix: &str) -> Option<i32> {
    let rest = file_name.strip_prefix(prefix)?;
    let pid = rest.split('-').next()?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || rest.len() == pid.len() {
        return None;
    }
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

/// Unlink every object in `dir` named with one of `prefixes` whose creator is
/// gone; returns the names removed.
pub fn sweep_stale(dir: &Path, prefixes: &[&str]) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        let Some(pid) = prefixes.iter().find_map(|p| creator_pid(name, p)) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let path = format!("/{name}");
        let held = Region::open(&path, None)
            .ok()
            .and_then(|r| r.lock_held(CREATOR_BYTE));
        if held != Some(true) && unlink_name(&path).is_ok() {
            removed.push(name.to_owned());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIXES: [&str; 2] = ["ferrocx-p2p-", "ferrocx-fakegpu-"];

    #[test]
    fn parses_only_our_names() {
        assert_eq!(creator_pid("ferrocx-p2p-123-1f-0", PREFIXES[0]), Some(123));
        assert_eq!(creator_pid("ferrocx-fakegpu-77-3", PREFIXES[1]), Some(77));
        for bad in [
            "ferrocx-p2p-123",
            "ferrocx-p2p-x-1f-0",
            "ferrocx-123-1f-0",
            "other-p2p-1-2",
            "ferrocx-p2p-0-1",
        ] {
            assert_eq!(creator_pid(bad, PREFIXES[0]), None, "{bad}");
        }
    }

    /// An object nobody holds a lock on, as a crashed creator leaves it.
    fn orphan(name: &str) {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid C string; the descriptor is closed right away.
        unsafe {
            let fd = libc::shm_open(c.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600);
            assert!(fd >= 0);
            libc::ftruncate(fd, 4096);
            libc::close(fd);
        }
    }

    #[test]
    fn removes_objects_of_dead_creators_only() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let crashed = format!("/ferrocx-p2p-{dead}-5eed-0");
        orphan(&crashed);
        // A dead pid here but a held lock: a creator in another pid namespace.
        let elsewhere = format!("/ferrocx-fakegpu-{dead}-5eed");
        let held = Region::create(&elsewhere, 4096, CREATOR_BYTE).unwrap();
        let live = format!("/ferrocx-p2p-{}-5eed-77", std::process::id());
        orphan(&live);
        let removed = sweep_stale(Path::new(SHM_DIR), &PREFIXES);
        // Another test's plugin init (same process, running in parallel) sweeps
        // too and may remove the orphan first: what matters is that it is gone
        // and that nothing else was taken.
        assert!(
            !Path::new(SHM_DIR).join(&crashed[1..]).exists(),
            "{removed:?}"
        );
        assert!(
            !removed
                .iter()
                .any(|n| *n == elsewhere[1..] || *n == live[1..]),
            "{removed:?}"
        );
        assert!(Path::new(SHM_DIR).join(&elsewhere[1..]).exists());
        assert!(Path::new(SHM_DIR).join(&live[1..]).exists());
        drop(held);
        unlink_name(&live).unwrap();
    }
}
