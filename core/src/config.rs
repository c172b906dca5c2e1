//! Settings read from the environment (`docs/ENV.md` lists every variable).

use crate::bootstrap::JobSecret;
use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Default bound for every wait: long enough for slow starts, short enough that a hang is visible.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Parse a duration: plain seconds (`30`, `0.5`) or with a unit (`500ms`, `30s`, `2m`).
pub fn parse_duration(var: &str, text: &str) -> Result<Duration> {
    ferrocx_sdk::env::parse_duration(text).ok_or_else(|| Error::Config {
        var: var.into(),
        message: format!("'{text}' is not a duration (examples: 30, 0.5, 500ms, 30s, 2m)"),
    })
}

/// `FERROCX_TIMEOUT`, or the default.
pub fn timeout_from_env() -> Result<Duration> {
    match std::env::var("FERROCX_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => parse_duration("FERROCX_TIMEOUT", &v),
        _ => Ok(DEFAULT_TIMEOUT),
    }
}

/// The variable holding the job secret itself.
pub const SECRET_VAR: &str = "FERROCX_SECRET";
/// The variable naming a file that holds the job secret.
pub const SECRET_FILE_VAR: &str = "FERROCX_SECRET_FILE";

/// The job secret that authenticates bootstrap connections: `FERROCX_SECRET` (the
/// text itself), or the contents of the file `FERROCX_SECRET_FILE` names (trailing
/// newlines trimmed). `None` when neither is set (blank counts as unset). A file that
/// cannot be read or is empty, or both variables set, is an `Error::Config`.
pub fn secret_from_env() -> Result<Option<JobSecret>> {
    secret_from(
        std::env::var_os(SECRET_VAR).as_deref(),
        std::env::var_os(SECRET_FILE_VAR).as_deref(),
    )
}

/// [`secret_from_env`] on given values (no environment access).
fn secret_from(text: Option<&OsStr>, file: Option<&OsStr>) -> Result<Option<JobSecret>> {
    // Bytes, not UTF-8: a secret may be any bytes the launcher can put in the environment.
    fn set(v: Option<&OsStr>) -> Option<&OsStr> {
        v.filter(|v| !v.as_bytes().trim_ascii().is_empty())
    }
    match (set(text), set(file)) {
        (Some(_), Some(_)) => Err(Error::Config {
            var: SECRET_VAR.into(),
            message: format!("both {SECRET_VAR} and {SECRET_FILE_VAR} are set; set only one"),
        }),
        (Some(t), None) => Ok(JobSecret::new(t.as_bytes())),
        (None, Some(f)) => read_secret_file(Path::new(f)).map(Some),
        (None, None) => Ok(None),
    }
}

/// The secret in `path`: its bytes without trailing newlines (`echo` adds one).
fn read_secret_file(path: &Path) -> Result<JobSecret> {
    let bad = |message: String| Error::Config {
        var: SECRET_FILE_VAR.into(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| {
        bad(format!(
            "cannot read the job secret file {}: {e}",
            path.display()
        ))
    })?;
    let end = bytes
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |i| i + 1);
    JobSecret::new(&bytes[..end])
        .ok_or_else(|| bad(format!("the job secret file {} is empty", path.display())))
}

/// A boolean variable: `1/true/yes/on` or `0/false/no/off`.
pub fn env_bool(var: &str, default: bool) -> Result<bool> {
    match std::env::var(var) {
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" => Ok(default),
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(Error::Config {
                var: var.into(),
                message: format!("'{v}' is not a boolean (use 1 or 0)"),
            }),
        },
        Err(_) => Ok(default),
    }
}

/// An unsigned integer variable.
pub fn env_usize(var: &str, default: usize) -> Result<usize> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => {
            ferrocx_sdk::env::parse_unsigned(&v).ok_or_else(|| Error::Config {
                var: var.into(),
                message: format!("'{v}' is not a non-negative integer (K, M, G suffixes allowed)"),
            })
        }
        _ => Ok(default),
    }
}

/// Every variable ferrocx reads: (name, default, meaning). `fxinfo` prints
/// them with their effective values; `docs/ENV.md` explains them at length.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    (
        "FERROCX_COMM_ID",
        "(none)",
        "rendezvous address host:port; rank 0 listens there",
    ),
    (
        "FERROCX_HOSTID",
        "(hostname + boot id)",
        "host identity: ranks with different values count as different hosts",
    ),
    (
        "FERROCX_RANK",
        "(none)",
        "this rank (set by fxrun); else OMPI_COMM_WORLD_RANK, SLURM_PROCID, RANK",
    ),
    (
        "FERROCX_NRANKS",
        "(none)",
        "number of ranks (set by fxrun); else OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, WORLD_SIZE",
    ),
    (
        "FERROCX_LOCAL_RANK",
        "(none)",
        "rank on this host (set by fxrun); else the launcher's, else computed",
    ),
    (
        "FERROCX_PORT",
        "MASTER_PORT+1",
        "rendezvous port when only MASTER_ADDR is given (torchrun)",
    ),
    (
        "FERROCX_TIMEOUT",
        "300",
        "bound for every wait, seconds (or 500ms, 2m)",
    ),
    (
        "FERROCX_SECRET",
        "(none; fxrun: random per job)",
        "job secret: bootstrap connections are accepted only from processes that know it",
    ),
    (
        "FERROCX_SECRET_FILE",
        "(none)",
        "file holding the job secret (trailing newline trimmed), instead of FERROCX_SECRET",
    ),
    (
        "FERROCX_CHECK_CALLS",
        "1",
        "compare every collective's call (type, op, count, root, order) with the neighbours' first; deferred: by the receivers only (roots run ahead, a difference fails a later call); 0: off",
    ),
    (
        "FERROCX_DEBUG",
        "warn",
        "log filter (EnvFilter syntax: info, info,ferrocx::select=debug)",
    ),
    (
        "FERROCX_DEBUG_FILE",
        "(stderr)",
        "log file; %h = host, %p = pid",
    ),
    (
        "FERROCX_PLUGINS",
        "(none)",
        "plugin .so files to load, comma or colon separated",
    ),
    (
        "FERROCX_PLUGIN_PATH",
        "(none)",
        "directories scanned for libferrocx_plugin_*.so, colon separated",
    ),
    (
        "FERROCX_BUILTIN_PLUGINS",
        "1",
        "0 disables the plugins linked into the binary",
    ),
    (
        "FERROCX_TRANSPORTS",
        "(all)",
        "a,b: only these, first listed wins; ^a,b: all but these",
    ),
    (
        "FERROCX_COLLECTIVES",
        "(all)",
        "collective plugins asked per call: a,b only these (must load); ^a,b all but these",
    ),
    (
        "FERROCX_NCHANNELS",
        "2",
        "channels (connections per peer) a large collective is striped over",
    ),
    (
        "FERROCX_CHANNEL_BYTES",
        "1048576",
        "a collective gets one more channel per this many bytes",
    ),
    (
        "FERROCX_ALGO",
        "(by size)",
        "force an algorithm where it applies: ring, rd, direct, chain, tree, pairwise",
    ),
    (
        "FERROCX_ALGO_CHUNK",
        "1048576",
        "largest message of pipelined and scratch-using algorithms, bytes",
    ),
    (
        "FERROCX_DEVICE_CHANNEL_BYTES",
        "67108864",
        "FERROCX_CHANNEL_BYTES for collectives on device buffers that do not reduce",
    ),
    (
        "FERROCX_DEVICE_CHUNK",
        "16777216",
        "FERROCX_ALGO_CHUNK for collectives on device buffers",
    ),
    (
        "FERROCX_PROGRESS_NAP",
        "sleep",
        "how progress threads wait with operations in flight: sleep (short sleeps) or yield",
    ),
    (
        "FERROCX_PLAN_BUDGET",
        "268435456",
        "bytes of collective work per plan; a group beyond it is cut into several plans",
    ),
    (
        "FERROCX_SHM_DISABLE",
        "0",
        "1 makes the shm transport decline every peer",
    ),
    (
        "FERROCX_SHM_CHUNK_SIZE",
        "524288",
        "shm ring slot size in bytes",
    ),
    ("FERROCX_SHM_NSLOTS", "8", "shm ring slots per connection"),
    (
        "FERROCX_SHM_SINGLE_COPY",
        "1",
        "1: single copy into any large receive; registered: only registered buffers; 0: never",
    ),
    (
        "FERROCX_SHM_SINGLE_COPY_MIN",
        "16384",
        "smallest message (bytes) sent by single copy into a registered buffer",
    ),
    (
        "FERROCX_DEVICE",
        "(local rank mod devices)",
        "CUDA device of this rank; -1: none",
    ),
    (
        "FERROCX_DEVICE_WAIT",
        "kernel",
        "how user streams wait for ferrocx: kernel (polling) or memop (cuStreamWaitValue32)",
    ),
    (
        "FERROCX_DEVICE_COPY",
        "ce",
        "local device copies: ce (cuMemcpyAsync) or kernel (a copy kernel on the SMs)",
    ),
    (
        "FERROCX_NVRTC_LIB",
        "(search)",
        "NVRTC library for the device reduction kernels",
    ),
    (
        "FERROCX_KERNEL_CACHE",
        "(~/.cache/ferrocx/kernels)",
        "directory keeping compiled device kernels between processes; off: none",
    ),
    (
        "FERROCX_SHM_COLL_PRIORITY",
        "150",
        "shm-coll's bid for small host collectives (0: never)",
    ),
    (
        "FERROCX_SHM_COLL_MAX_BYTES",
        "262144",
        "shm-coll: largest block it takes (shrinks as 4/ranks above 4 ranks)",
    ),
    (
        "FERROCX_SHM_COLL_BYTES",
        "65536",
        "shm-coll: mailbox slot size (two per pair of ranks)",
    ),
    (
        "FERROCX_SHM_COLL_MEMORY",
        "16777216",
        "shm-coll: /dev/shm bytes a communicator's mailboxes may take",
    ),
    (
        "FERROCX_SHM_COLL_P2P_BYTES",
        "4096",
        "shm-coll: largest host send/receive it takes (rings of 8 slots per pair; 0: none)",
    ),
    (
        "FERROCX_SHM_COLL_MAX_RANKS",
        "16",
        "shm-coll takes part only up to this many ranks",
    ),
    (
        "FERROCX_CE_PRIORITY",
        "200",
        "ce's bid for device collectives on one host (0: never)",
    ),
    (
        "FERROCX_CE_LL_BYTES",
        "1M",
        "ce: blocks up to this run as one LL kernel (sizes its areas; 0: never)",
    ),
    (
        "FERROCX_CE_LL128_BYTES",
        "auto",
        "ce: blocks in a measured range (auto) or above the LL limit up to this run as one LL128 kernel, only with a GPU per rank joined by NVLink (0: never)",
    ),
    (
        "FERROCX_CE_SIMPLE_BYTES",
        "auto",
        "ce: blocks above the LL limit and up to this run as one Simple kernel (auto: per collective, measured; 0: never)",
    ),
    (
        "FERROCX_CE_SIMPLE_SLOT",
        "auto",
        "ce: bytes per slot of the Simple and point-to-point kernels' rings (nranks × 128 slots per rank; auto: 128K for the Simple kernel at 2 ranks, 256K at 3 and 4, else 64K)",
    ),
    (
        "FERROCX_CE_SIMPLE_CHUNK",
        "auto",
        "ce: the Simple kernel's largest chunk, within the slot (auto: 64K below 256 MiB segments, whole slots at 2 ranks from 16 MiB, about 128 chunks for a chain from 16 MiB)",
    ),
    (
        "FERROCX_CE_SIMPLE_BLOCKS",
        "auto",
        "ce: most sending blocks of one Simple kernel (as many receive; auto: 128 for reduce_scatter, all_gather and alltoall above 2 ranks, else 64)",
    ),
    (
        "FERROCX_CE_SIMPLE_SPREAD",
        "1",
        "ce: above 2 ranks a Simple kernel's blocks take one (chunk, peer) pair each",
    ),
    (
        "FERROCX_CE_P2P_BYTES",
        "16M",
        "ce: device sends/receives up to this run as its point-to-point kernel (0: never)",
    ),
    (
        "FERROCX_CE_STAGE",
        "auto",
        "ce: stage calls outside windows through its scratch (auto: while ce checks calls)",
    ),
    (
        "FERROCX_CE_SCRATCH_BYTES",
        "32M",
        "ce: per-rank scratch for staged calls (0: no staging)",
    ),
    (
        "FERROCX_CE_CHECK_CALLS",
        "(as FERROCX_CHECK_CALLS)",
        "ce: compare the ranks' call notes without a host round trip",
    ),
    (
        "FERROCX_CE_REDUCE",
        "1",
        "ce: also all_reduce/reduce_scatter (and the LL kernel, which lives in their modules)",
    ),
    (
        "FERROCX_CE_ONESHOT_BYTES",
        "32M",
        "ce: all_reduce on windows one-shot up to this at 2 ranks (x 2/n), two-shot above",
    ),
    (
        "FERROCX_CE_BATCH",
        "8",
        "ce: copies per batch when a large collective is split",
    ),
    (
        "FERROCX_CE_BATCH_BYTES",
        "512M",
        "ce: size from which a collective is split into batches",
    ),
    (
        "FERROCX_CE_MEMCPY_BATCH",
        "1",
        "ce: one cuMemcpyBatchAsync per batch where the driver has it",
    ),
    (
        "FERROCX_P2P_DISABLE",
        "0",
        "1 makes the p2p transport decline every peer",
    ),
    (
        "FERROCX_P2P_DIRECT",
        "1",
        "p2p copies straight into receive buffers: 1 any, registered, 0 never",
    ),
    (
        "FERROCX_SOCKET_DISABLE",
        "0",
        "1 makes the net-socket transport decline every peer",
    ),
    (
        "FERROCX_SOCKET_IFNAME",
        "(not lo, docker)",
        "interfaces (rails) net-socket uses: eth (prefix), =eth0 (exact), ^docker,lo (exclude)",
    ),
    (
        "FERROCX_SOCKET_NRAILS",
        "4",
        "most interfaces one net-socket connection stripes over",
    ),
    (
        "FERROCX_SOCKET_NSOCKS",
        "1",
        "TCP sockets per rail and connection",
    ),
    (
        "FERROCX_SOCKET_CHUNK_SIZE",
        "524288",
        "bytes per chunk striped over net-socket's sockets",
    ),
    (
        "FERROCX_SOCKET_WINDOW",
        "33554432",
        "unacknowledged bytes per multi-rail net-socket connection",
    ),
    (
        "FERROCX_SOCKET_RAIL_TIMEOUT",
        "5s",
        "data unacknowledged this long fails a net-socket rail (TCP_USER_TIMEOUT)",
    ),
    (
        "FERROCX_SOCKET_RECOVERY",
        "10s",
        "quiet time before a failed net-socket rail is probed and taken back",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("X", "30").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration("X", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_duration("X", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(
            parse_duration("X", "0.5s").unwrap(),
            Duration::from_millis(500)
        );
        let e = parse_duration("FERROCX_TIMEOUT", "soon").unwrap_err();
        assert!(e.to_string().contains("FERROCX_TIMEOUT"), "{e}");
        assert!(parse_duration("X", "-1").is_err());
        assert!(parse_duration("X", "0").is_err());
    }

    #[test]
    fn secrets_from_text_or_file() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert!(secret_from(None, None).unwrap().is_none());
        assert!(
            secret_from(os(""), os("  ")).unwrap().is_none(),
            "blank is unset"
        );
        assert_eq!(secret_from(os("s3cret"), None).unwrap().unwrap().len(), 6);
        let e = secret_from(os("a"), os("/f")).unwrap_err().to_string();
        assert!(
            e.contains("both FERROCX_SECRET and FERROCX_SECRET_FILE"),
            "{e}"
        );

        let dir = std::env::temp_dir().join(format!("fx-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "s3cret\r\n\n").unwrap();
        let got = secret_from(None, Some(file.as_os_str())).unwrap().unwrap();
        assert_eq!(got.len(), 6, "trailing newlines trimmed");
        std::fs::write(&file, "\n").unwrap();
        let e = secret_from(None, Some(file.as_os_str())).unwrap_err();
        assert!(
            matches!(&e, Error::Config { var, message } if var == "FERROCX_SECRET_FILE"
                && message.contains(&format!("{} is empty", file.display()))),
            "{e}"
        );
        let missing = dir.join("missing");
        let e = secret_from(None, Some(missing.as_os_str()))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "bad configuration FERROCX_SECRET_FILE: cannot read the job secret file {}: ",
                missing.display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every variable fxinfo prints is documented in docs/ENV.md, once per name.
    #[test]
    fn every_listed_variable_is_documented() {
        let env = include_str!("../../docs/ENV.md");
        let mut seen = std::collections::HashSet::new();
        for (name, _, meaning) in VARIABLES {
            // The first cell of a table row names it (alone or with siblings).
            let documented = env.lines().any(|l| {
                l.strip_prefix("| ")
                    .and_then(|r| r.split(" |").next())
                    .is_some_and(|cell| cell.contains(&format!("`{name}`")))
            });
            assert!(documented, "{name} is not in docs/ENV.md's tables");
            assert!(seen.insert(*name), "{name} listed twice");
            assert!(!meaning.is_empty(), "{name} has no meaning");
        }
    }
}
