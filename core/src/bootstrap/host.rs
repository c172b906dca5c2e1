//! Host identity: which ranks share a machine.
//!
//! The hostname alone is not enough: containers on different machines often share one
//! (e.g. every pod named `worker`). The kernel's boot id is unique per boot of a machine,
//! so hashing both tells machines apart while ranks in sibling containers of one
//! machine (same boot id, same hostname) still count as local.

use std::sync::OnceLock;

/// This machine's hostname (`/proc/sys/kernel/hostname`, then `$HOSTNAME`, else `localhost`).
pub fn host_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        from_proc
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    })
    .clone()
}

/// A hash identifying this machine: hostname plus `/proc/sys/kernel/random/boot_id`.
///
/// Stable across processes and builds (FNV-1a, not the std hasher, whose output may
/// change between Rust versions), so every rank computes the same value for one host.
pub fn host_hash() -> u64 {
    static HASH: OnceLock<u64> = OnceLock::new();
    *HASH.get_or_init(|| {
        let boot_id =
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        hash_identity(&host_name(), boot_id.trim())
    })
}

/// The hash behind [`host_hash`], separated so tests can feed it.
fn hash_identity(name: &str, boot_id: &str) -> u64 {
    let mut h = Fnv::new();
    h.write(name.as_bytes());
    h.write(&[0]); // separator: ("ab","c") and ("a","bc") must differ
    h.write(boot_id.as_bytes());
    h.finish()
}

/// 64-bit FNV-1a: tiny, deterministic, good enough for identities (not security).
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_identity_is_stable_and_discriminating() {
        assert_eq!(host_hash(), host_hash());
        assert!(!host_name().is_empty());
        // Same hostname, different boot: different machines.
        assert_ne!(hash_identity("worker", "a"), hash_identity("worker", "b"));
        assert_ne!(hash_identity("ab", "c"), hash_identity("a", "bc"));
        assert_eq!(hash_identity("worker", "a"), hash_identity("worker", "a"));
    }
}
