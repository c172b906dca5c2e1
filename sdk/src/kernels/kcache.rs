//! An on-disk cache of the images NVRTC builds, so that a process opening a GPU
//! does not pay the compile again (every kernel is built and loaded when the
//! device is opened: see [`super`]).
//!
//! An entry is keyed by everything that decides the image: the source, the
//! options, the target, NVRTC's version and ferrocx's. Entries are written to a
//! temporary file and renamed into place, so a reader sees a whole entry or none;
//! an unreadable or foreign file is a miss. Failing to read or write the cache
//! never fails a compile (it is logged at debug level).
//!
//! `FERROCX_KERNEL_CACHE`: the directory (default `$XDG_CACHE_HOME/ferrocx/kernels`,
//! else `$HOME/.cache/ferrocx/kernels`); `off` (or `0`) turns the cache off.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// The variable naming the cache directory.
pub const ENV: &str = "FERROCX_KERNEL_CACHE";

/// First bytes of every entry (a format change bumps it).
const MAGIC: &[u8] = b"ferrocx-kernel-1\n";

/// The cache directory, or `None` when the cache is off or no home is known.
fn dir() -> Option<PathBuf> {
    match std::env::var(ENV) {
        Ok(v) if v == "off" || v == "0" => None,
        Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => {
            let base = match std::env::var_os("XDG_CACHE_HOME") {
                Some(x) if !x.is_empty() => PathBuf::from(x),
                _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
            };
            Some(base.join("ferrocx").join("kernels"))
        }
    }
}

/// The file name of an entry: two independent 64-bit hashes of `parts`.
fn file_name(parts: &[&str]) -> String {
    let hash = |seed: u64| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        parts.hash(&mut h);
        h.finish()
    };
    format!("{:016x}{:016x}.bin", hash(0x6678), hash(0x6b63))
}

/// The image cached under `parts`: (description, bytes), or `None`.
pub fn get(parts: &[&str]) -> Option<(String, Vec<u8>)> {
    let path = dir()?.join(file_name(parts));
    let data = std::fs::read(&path).ok()?;
    let rest = data.strip_prefix(MAGIC)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let what = std::str::from_utf8(&rest[..nl]).ok()?.to_string();
    let bytes = rest[nl + 1..].to_vec();
    if bytes.is_empty() {
        return None;
    }
    tracing::debug!(target: "ferrocx::device", path = %path.display(), "kernel image from the cache");
    Some((what, bytes))
}

/// Store an image under `parts` (best effort).
pub fn put(parts: &[&str], what: &str, bytes: &[u8]) {
    let Some(dir) = dir() else { return };
    let path = dir.join(file_name(parts));
    let tmp = dir.join(format!(".{}.{}.tmp", file_name(parts), std::process::id()));
    let mut data = Vec::with_capacity(MAGIC.len() + what.len() + 1 + bytes.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(what.replace('\n', " ").as_bytes());
    data.push(b'\n');
    data.extend_from_slice(bytes);
    let r = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&tmp, &data))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!(target: "ferrocx::device", dir = %dir.display(), "kernel cache not written: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_misses() {
        let d = std::env::temp_dir().join(format!("fx-kcache-{}", std::process::id()));
        // The variable is read on each call; this test is the only one in the crate
        // that sets it.
        std::env::set_var(ENV, &d);
        assert!(get(&["src", "sm_90"]).is_none());
        put(&["src", "sm_90"], "CUBIN sm_90\n(x)", b"\x7fELF....");
        let (what, bytes) = get(&["src", "sm_90"]).expect("cached");
        assert_eq!(what, "CUBIN sm_90 (x)");
        assert_eq!(bytes, b"\x7fELF....");
        // Another key, and a part boundary moved, both miss.
        assert!(get(&["src", "sm_80"]).is_none());
        assert!(get(&["srcs", "m_90"]).is_none());
        // A damaged entry is a miss, not an error.
        let f = d.join(file_name(&["src", "sm_90"]));
        std::fs::write(&f, b"garbage").unwrap();
        assert!(get(&["src", "sm_90"]).is_none());
        std::env::set_var(ENV, "off");
        put(&["a"], "x", b"y");
        assert!(get(&["a"]).is_none());
        std::env::remove_var(ENV);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
