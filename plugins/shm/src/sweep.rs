//! Removal of segments left behind by processes that died during a connect window.
//!
//! A segment is unlinked as soon as both ends have mapped it, so a name in
//! /dev/shm only survives when its creator died between `setup` and the
//! sender attaching. Names carry the creator's pid
//! (`ferrocx-<pid>-<conn_id hex>-<counter hex>`); any whose creator no longer
//! exists is removed at `init`.

use crate::proc::pid_alive;
use crate::segment::unlink_name;
use std::path::Path;

/// Directory where POSIX shared memory objects appear.
pub const SHM_DIR: &str = "/dev/shm";

/// The creator pid of a ferrocx shm segment name (without the leading '/'),
/// or `None` for any other name.
pub fn creator_pid(file_name: &str) -> Option<i32> {
    let rest = file_name.strip_prefix("ferrocx-")?;
    let mut parts = rest.split('-');
    let pid = parts.next()?;
    let conn = parts.next()?;
    let counter = parts.next()?;
    let digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.bytes().all(|b| {
                if hex {
                    b.is_ascii_hexdigit()
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    if parts.next().is_some()
        || !digits(pid, false)
        || !digits(conn, true)
        || !digits(counter, true)
    {
        return None;
    }
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

/// Unlink every segment in `dir` whose creator has exited; returns the names removed.
pub fn sweep_stale(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        let Some(pid) = creator_pid(name) else {
            continue;
        };
        if !pid_alive(pid) && unlink_name(&format!("/{name}")).is_ok() {
            removed.push(name.to_owned());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;
    use crate::segment::Segment;

    #[test]
    fn parses_only_our_names() {
        assert_eq!(creator_pid("ferrocx-123-1f-0"), Some(123));
        for bad in [
            "ferrocx-123-1f",
            "ferrocx-x-1f-0",
            "ferrocx-12-zz-0",
            "ferrocx-1-2-3-4",
            "other-1-2-3",
            "ferrocx-0-1-1",
        ] {
            assert_eq!(creator_pid(bad), None, "{bad}");
        }
    }

    #[test]
    fn removes_segments_of_dead_creators_only() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_name = format!("/ferrocx-{dead}-5eed-0");
        let live_name = format!("/ferrocx-{}-5eed-77", std::process::id());
        let layout = Layout::new(2, 64).unwrap();
        // Leak the dead one's mapping without unlinking, as a crash would.
        std::mem::forget(Segment::create(&dead_name, layout).unwrap());
        let live = Segment::create(&live_name, layout).unwrap();
        let removed = sweep_stale(Path::new(SHM_DIR));
        // Another test's plugin init (same process, in parallel) sweeps too and
        // may get there first: what matters is that it is gone, the live one not.
        assert!(
            !Path::new(SHM_DIR).join(&dead_name[1..]).exists(),
            "{removed:?}"
        );
        assert!(!removed.iter().any(|n| *n == live_name[1..]), "{removed:?}");
        assert!(Path::new(SHM_DIR).join(&live_name[1..]).exists());
        drop(live);
    }
}
