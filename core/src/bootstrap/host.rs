//! Host identity: which ranks share a machine.
//!
//! The hostname alone is not enough: containers on different machines often share one
//! (e.g. every pod named `worker`). The kernel's boot id is unique per boot of a machine,
//! so hashing both tells machines apart while ranks in sibling containers of one
//! machine (same boot id, same hostname) still count as local.
//!
//! `FERROCX_HOSTID` (like `NCCL_HOSTID`) replaces that identity: ranks with equal values
//! share a host, ranks with different values do not, wherever they run. Network
//! namespaces or containers of one machine can so act as separate hosts.

use std::os::unix::ffi::OsStrExt;
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

/// The variable that overrides the host identity.
pub const HOSTID_VAR: &str = "FERROCX_HOSTID";

/// A hash identifying this machine: hostname plus `/proc/sys/kernel/random/boot_id`, or
/// the value of `FERROCX_HOSTID` when it is set and not blank.
///
/// Stable across processes and builds (FNV-1a, not the std hasher, whose output may
/// change between Rust versions), so every rank computes the same value for one host.
pub fn host_hash() -> u64 {
    static HASH: OnceLock<u64> = OnceLock::new();
    *HASH.get_or_init(|| {
        let var = std::env::var_os(HOSTID_VAR);
        match host_id(var.as_deref().map(OsStrExt::as_bytes)) {
            Some(id) => hash_host_id(id),
            None => {
                let boot_id =
                    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                hash_identity(&host_name(), boot_id.trim())
            }
        }
    })
}

/// The identity `FERROCX_HOSTID` gives (`raw` is its value): `None` when unset or blank
/// (only white space), else the value without surrounding white space. Any bytes are
/// accepted; the value is only hashed.
fn host_id(raw: Option<&[u8]>) -> Option<&[u8]> {
    raw.map(<[u8]>::trim_ascii).filter(|id| !id.is_empty())
}

/// The hash of a `FERROCX_HOSTID` identity, in its own domain: its input starts with a
/// NUL byte, which no hostname does, so it never equals a hostname and boot id hash input.
fn hash_host_id(id: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.write(b"\0FERROCX_HOSTID\0");
    h.write(id);
    h.finish()
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

    #[test]
    fn hostid_overrides_the_identity_when_set_and_not_blank() {
        assert_eq!(host_id(None), None);
        assert_eq!(host_id(Some(b"")), None);
        assert_eq!(host_id(Some(b" \t\n")), None);
        assert_eq!(host_id(Some(b"nodeA")), Some(&b"nodeA"[..]));
        assert_eq!(host_id(Some(b"  nodeA\n")), Some(&b"nodeA"[..]));
        assert_eq!(host_id(Some(b"\xffraw")), Some(&b"\xffraw"[..]));
        // Equal ids: one host; different ids: different hosts.
        assert_eq!(hash_host_id(b"nodeA"), hash_host_id(b"nodeA"));
        assert_ne!(hash_host_id(b"nodeA"), hash_host_id(b"nodeB"));
        // Its own domain: an id is not read as a hostname with an empty boot id.
        assert_ne!(hash_host_id(b"worker"), hash_identity("worker", ""));
    }
}
