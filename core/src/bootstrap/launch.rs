//! Who launched this process: the rendezvous address and this process's rank, read from
//! ferrocx's own variables or from the launcher the user already runs.
//!
//! Rank and size, first match wins:
//! 1. `FERROCX_RANK`, `FERROCX_NRANKS`, `FERROCX_LOCAL_RANK` (set by `fxrun`);
//! 2. Open MPI: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`;
//! 3. Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`;
//! 4. torchrun: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
//!
//! One refinement: a process started by torchrun *inside* a Slurm task (`srun torchrun …`,
//! the usual multi-node recipe) inherits the task's `SLURM_PROCID`, which is shared by all
//! of torchrun's workers on that node. When torchrun's own marker `TORCHELASTIC_RUN_ID`
//! is present, torchrun's variables therefore win over Slurm's.
//!
//! Root: `FERROCX_COMM_ID=host:port`; else `MASTER_ADDR` with port `FERROCX_PORT`, or
//! `MASTER_PORT + 1` (torch's own TCP store already owns `MASTER_PORT`).

use crate::error::{Error, Result};

/// How this process was launched: where to rendezvous and who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchInfo {
    /// Rendezvous address of rank 0, `host:port` (`[v6addr]:port` for IPv6).
    pub root: String,
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// Rank among the processes on this host, when the launcher says.
    pub local_rank: Option<usize>,
    /// Which variables the rank came from: `"FERROCX"`, `"Open MPI"`, `"Slurm"` or `"torchrun"`.
    pub source: &'static str,
}

/// One launcher's variable names for rank, size and local rank.
struct Launcher {
    source: &'static str,
    rank: &'static str,
    size: &'static str,
    local: &'static str,
}

const FERROCX: Launcher = Launcher {
    source: "FERROCX",
    rank: "FERROCX_RANK",
    size: "FERROCX_NRANKS",
    local: "FERROCX_LOCAL_RANK",
};
const OPEN_MPI: Launcher = Launcher {
    source: "Open MPI",
    rank: "OMPI_COMM_WORLD_RANK",
    size: "OMPI_COMM_WORLD_SIZE",
    local: "OMPI_COMM_WORLD_LOCAL_RANK",
};
const SLURM: Launcher = Launcher {
    source: "Slurm",
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local: "SLURM_LOCALID",
};
const TORCHRUN: Launcher = Launcher {
    source: "torchrun",
    rank: "RANK",
    size: "WORLD_SIZE",
    local: "LOCAL_RANK",
};

const HOW_TO_LAUNCH: &str =
    "launch with fxrun, mpirun, srun or torchrun, or set FERROCX_RANK and FERROCX_NRANKS";

impl LaunchInfo {
    /// Read the launch variables of this process's environment.
    pub fn from_env() -> Result<LaunchInfo> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// Same as [`from_env`](Self::from_env) with variables read through `lookup`
    /// (tests and embedders pass their own table). Empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<LaunchInfo> {
        let get = |var: &str| {
            lookup(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let root = root_address(&get)?;
        let launcher = pick_launcher(&get)?;
        let rank = number(&get, launcher.rank)?;
        let nranks = number(&get, launcher.size)?;
        let local_rank = match get(launcher.local) {
            Some(v) => Some(parse_usize(launcher.local, &v)?),
            None => None,
        };
        if nranks == 0 {
            return Err(Error::Config {
                var: launcher.size.into(),
                message: "the number of ranks must be at least 1".into(),
            });
        }
        if rank >= nranks {
            return Err(Error::Config {
                var: launcher.rank.into(),
                message: format!(
                    "rank {rank} is out of range: {} says there are {nranks} ranks (0..{nranks})",
                    launcher.size
                ),
            });
        }
        Ok(LaunchInfo {
            root,
            rank,
            nranks,
            local_rank,
            source: launcher.source,
        })
    }
}

/// The first launcher whose variables are present (see the module docs for the order).
fn pick_launcher(get: &impl Fn(&str) -> Option<String>) -> Result<&'static Launcher> {
    let present = |l: &Launcher| get(l.rank).is_some() || get(l.size).is_some();
    if present(&FERROCX) {
        return Ok(&FERROCX);
    }
    if present(&OPEN_MPI) {
        return Ok(&OPEN_MPI);
    }
    // torchrun nested in a Slurm task: its workers share the task's SLURM_PROCID.
    if get("TORCHELASTIC_RUN_ID").is_some() && present(&TORCHRUN) {
        return Ok(&TORCHRUN);
    }
    // SLURM_NTASKS alone is also set in a bare allocation shell, so key on SLURM_PROCID.
    if get(SLURM.rank).is_some() {
        return Ok(&SLURM);
    }
    if present(&TORCHRUN) {
        return Ok(&TORCHRUN);
    }
    Err(Error::Config {
        var: FERROCX.rank.into(),
        message: format!("no rank found (none of FERROCX_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, RANK is set): {HOW_TO_LAUNCH}"),
    })
}

/// A required non-negative integer.
fn number(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<usize> {
    match get(var) {
        Some(v) => parse_usize(var, &v),
        None => Err(Error::Config {
            var: var.into(),
            message: format!(
                "is not set (the launcher set only part of its variables): {HOW_TO_LAUNCH}"
            ),
        }),
    }
}

fn parse_usize(var: &str, text: &str) -> Result<usize> {
    text.parse().map_err(|_| Error::Config {
        var: var.into(),
        message: format!("'{text}' is not a non-negative integer"),
    })
}

/// `FERROCX_COMM_ID`, or the address derived from torchrun's `MASTER_ADDR`.
fn root_address(get: &impl Fn(&str) -> Option<String>) -> Result<String> {
    if let Some(id) = get("FERROCX_COMM_ID") {
        let (host, port) = split_host_port(&id).map_err(|why| Error::Config {
            var: "FERROCX_COMM_ID".into(),
            message: format!("'{id}' {why}"),
        })?;
        check_port("FERROCX_COMM_ID", port)?;
        return Ok(join_host_port(&host, port));
    }
    let Some(addr) = get("MASTER_ADDR") else {
        return Err(Error::Config {
            var: "FERROCX_COMM_ID".into(),
            message: "is not set: set FERROCX_COMM_ID=host:port (where rank 0 listens), or MASTER_ADDR and \
                      MASTER_PORT as torchrun does; fxrun sets it for you"
                .into(),
        });
    };
    // torch accepts a bare IPv6 address in MASTER_ADDR; allow brackets too.
    let host = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(&addr)
        .to_string();
    if !valid_host(&host) {
        return Err(Error::Config {
            var: "MASTER_ADDR".into(),
            message: format!("'{addr}' is not a host name or IP address"),
        });
    }
    let port = if let Some(p) = get("FERROCX_PORT") {
        let port = parse_port("FERROCX_PORT", &p)?;
        check_port("FERROCX_PORT", port)?;
        port
    } else {
        let Some(p) = get("MASTER_PORT") else {
            return Err(Error::Config {
                var: "MASTER_PORT".into(),
                message: "is not set although MASTER_ADDR is: set MASTER_PORT (ferrocx uses MASTER_PORT+1), \
                          FERROCX_PORT, or FERROCX_COMM_ID=host:port"
                    .into(),
            });
        };
        let master = parse_port("MASTER_PORT", &p)?;
        match master.checked_add(1) {
            Some(port) if master != 0 => port,
            _ => {
                return Err(Error::Config {
                    var: "MASTER_PORT".into(),
                    message: format!(
                        "'{p}' leaves no room for ferrocx's port MASTER_PORT+1: set FERROCX_PORT"
                    ),
                })
            }
        }
    };
    Ok(join_host_port(&host, port))
}

fn parse_port(var: &str, text: &str) -> Result<u16> {
    text.parse().map_err(|_| Error::Config {
        var: var.into(),
        message: format!("'{text}' is not a port number (1-65535)"),
    })
}

fn check_port(var: &str, port: u16) -> Result<()> {
    if port == 0 {
        return Err(Error::Config {
            var: var.into(),
            message: "port 0 cannot be a rendezvous port: use 1-65535".into(),
        });
    }
    Ok(())
}

/// Split `host:port`, `[v6]:port` or `v4:port`; the error says what was expected.
pub(crate) fn split_host_port(text: &str) -> std::result::Result<(String, u16), String> {
    const EXPECTED: &str =
        "expected host:port, e.g. 10.0.0.1:29500, [fe80::1]:29500 or node01:29500";
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("has an unclosed '[': {EXPECTED}"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| format!("has no port after ']': {EXPECTED}"))?;
        // A numeric zone (`[fe80::1%2]`) is allowed: link-local addresses need one.
        let (ip, zone) = host.split_once('%').unwrap_or((host, "0"));
        if ip.parse::<std::net::Ipv6Addr>().is_err() || zone.parse::<u32>().is_err() {
            return Err(format!(
                "has '{host}' in brackets, which is not an IPv6 address: {EXPECTED}"
            ));
        }
        (host, port)
    } else {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("has no port: {EXPECTED}"))?;
        if host.contains(':') {
            return Err(format!(
                "looks like an IPv6 address without brackets: write [address]:port ({EXPECTED})"
            ));
        }
        if !valid_host(host) {
            return Err(format!(
                "has '{host}', which is not a host name or IP address: {EXPECTED}"
            ));
        }
        (host, port)
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("has port '{port}', which is not a number 0-65535: {EXPECTED}"))?;
    Ok((host.to_string(), port))
}

/// Host names (RFC 1123 characters, plus `_` seen in the wild), IPv4 or IPv6 literals.
fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && (host.parse::<std::net::IpAddr>().is_ok()
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
}

/// The inverse of [`split_host_port`]: brackets around IPv6 literals.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<LaunchInfo> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchInfo::from_lookup(|k| map.get(k).cloned())
    }

    fn config_var(r: Result<LaunchInfo>) -> (String, String) {
        match r {
            Err(Error::Config { var, message }) => (var, message),
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn ferrocx_variables() {
        let li = parse(&[
            ("FERROCX_COMM_ID", "10.0.0.1:29500"),
            ("FERROCX_RANK", "3"),
            ("FERROCX_NRANKS", "8"),
            ("FERROCX_LOCAL_RANK", "1"),
        ])
        .unwrap();
        assert_eq!(
            li,
            LaunchInfo {
                root: "10.0.0.1:29500".into(),
                rank: 3,
                nranks: 8,
                local_rank: Some(1),
                source: "FERROCX"
            }
        );
    }

    #[test]
    fn precedence_ferrocx_mpi_slurm_torchrun() {
        let all = [
            ("FERROCX_COMM_ID", "h:1"),
            ("FERROCX_RANK", "0"),
            ("FERROCX_NRANKS", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
            ("RANK", "3"),
            ("WORLD_SIZE", "5"),
            ("LOCAL_RANK", "3"),
        ];
        let li = parse(&all).unwrap();
        assert_eq!(
            (li.source, li.rank, li.nranks, li.local_rank),
            ("FERROCX", 0, 2, None)
        );
        let li = parse(
            &all[3..]
                .iter()
                .chain(&all[..1])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            (li.source, li.rank, li.nranks, li.local_rank),
            ("Open MPI", 1, 3, Some(1))
        );
        let li = parse(
            &all[6..]
                .iter()
                .chain(&all[..1])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            (li.source, li.rank, li.nranks, li.local_rank),
            ("Slurm", 2, 4, Some(0))
        );
        let li = parse(
            &all[9..]
                .iter()
                .chain(&all[..1])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            (li.source, li.rank, li.nranks, li.local_rank),
            ("torchrun", 3, 5, Some(3))
        );
    }

    #[test]
    fn torchrun_inside_srun_uses_torchrun_ranks() {
        let li = parse(&[
            ("MASTER_ADDR", "node01"),
            ("MASTER_PORT", "29500"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("TORCHELASTIC_RUN_ID", "job7"),
            ("RANK", "5"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_RANK", "5"),
        ])
        .unwrap();
        assert_eq!(
            (li.source, li.rank, li.nranks, li.root.as_str()),
            ("torchrun", 5, 16, "node01:29501")
        );
    }

    #[test]
    fn torchrun_master_addr_and_ports() {
        let base = [("RANK", "1"), ("WORLD_SIZE", "2")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v: Vec<(&str, &str)> = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        assert_eq!(
            with(&[("MASTER_ADDR", "10.1.2.3"), ("MASTER_PORT", "29500")])
                .unwrap()
                .root,
            "10.1.2.3:29501"
        );
        assert_eq!(
            with(&[
                ("MASTER_ADDR", "10.1.2.3"),
                ("MASTER_PORT", "29500"),
                ("FERROCX_PORT", "4000")
            ])
            .unwrap()
            .root,
            "10.1.2.3:4000"
        );
        assert_eq!(
            with(&[("MASTER_ADDR", "::1"), ("MASTER_PORT", "29500")])
                .unwrap()
                .root,
            "[::1]:29501"
        );
        assert_eq!(
            with(&[("MASTER_ADDR", "[fe80::2]"), ("MASTER_PORT", "7")])
                .unwrap()
                .root,
            "[fe80::2]:8"
        );
        // FERROCX_COMM_ID wins over MASTER_ADDR.
        assert_eq!(
            with(&[
                ("MASTER_ADDR", "a"),
                ("MASTER_PORT", "1"),
                ("FERROCX_COMM_ID", "b:9")
            ])
            .unwrap()
            .root,
            "b:9"
        );
        let (var, msg) = config_var(with(&[("MASTER_ADDR", "10.1.2.3")]));
        assert_eq!(var, "MASTER_PORT", "{msg}");
        let (var, msg) = config_var(with(&[
            ("MASTER_ADDR", "10.1.2.3"),
            ("MASTER_PORT", "65535"),
        ]));
        assert!(
            var == "MASTER_PORT" && msg.contains("FERROCX_PORT"),
            "{var}: {msg}"
        );
        let (var, _) = config_var(with(&[("MASTER_ADDR", "10.1.2.3"), ("MASTER_PORT", "x")]));
        assert_eq!(var, "MASTER_PORT");
        let (var, _) = config_var(with(&[("MASTER_ADDR", "bad host!"), ("MASTER_PORT", "1")]));
        assert_eq!(var, "MASTER_ADDR");
    }

    #[test]
    fn comm_id_forms() {
        let root = |id: &str| {
            parse(&[
                ("FERROCX_COMM_ID", id),
                ("FERROCX_RANK", "0"),
                ("FERROCX_NRANKS", "1"),
            ])
        };
        assert_eq!(root("127.0.0.1:5000").unwrap().root, "127.0.0.1:5000");
        assert_eq!(root("[::1]:5000").unwrap().root, "[::1]:5000");
        assert_eq!(root("[fe80::1%2]:5000").unwrap().root, "[fe80::1%2]:5000");
        assert_eq!(
            root(" node-01.cluster:5000 ").unwrap().root,
            "node-01.cluster:5000"
        );
        for bad in [
            "127.0.0.1",
            "::1:5000",
            "[::1]5000",
            "[::1:5000",
            "[nothost]:1",
            "h:99999",
            "h:",
            ":5000",
            "h:0",
            "a b:1",
        ] {
            let (var, msg) = config_var(root(bad));
            assert_eq!(var, "FERROCX_COMM_ID", "{bad}: {msg}");
        }
        let (_, msg) = config_var(root("::1:5000"));
        assert!(msg.contains("brackets"), "{msg}");
    }

    #[test]
    fn missing_and_malformed() {
        let (var, msg) = config_var(parse(&[("FERROCX_RANK", "0"), ("FERROCX_NRANKS", "1")]));
        assert_eq!(var, "FERROCX_COMM_ID");
        assert!(msg.contains("host:port") && msg.contains("fxrun"), "{msg}");

        let (var, msg) = config_var(parse(&[("FERROCX_COMM_ID", "h:1")]));
        assert_eq!(var, "FERROCX_RANK");
        assert!(msg.contains("torchrun"), "{msg}");

        let (var, _) = config_var(parse(&[("FERROCX_COMM_ID", "h:1"), ("FERROCX_RANK", "0")]));
        assert_eq!(var, "FERROCX_NRANKS");
        let (var, _) = config_var(parse(&[
            ("FERROCX_COMM_ID", "h:1"),
            ("FERROCX_RANK", "x"),
            ("FERROCX_NRANKS", "2"),
        ]));
        assert_eq!(var, "FERROCX_RANK");
        let (var, _) = config_var(parse(&[
            ("FERROCX_COMM_ID", "h:1"),
            ("FERROCX_RANK", "-1"),
            ("FERROCX_NRANKS", "2"),
        ]));
        assert_eq!(var, "FERROCX_RANK");
        let (var, msg) = config_var(parse(&[
            ("FERROCX_COMM_ID", "h:1"),
            ("SLURM_PROCID", "4"),
            ("SLURM_NTASKS", "4"),
        ]));
        assert!(
            var == "SLURM_PROCID" && msg.contains("out of range"),
            "{var}: {msg}"
        );
        let (var, _) = config_var(parse(&[
            ("FERROCX_COMM_ID", "h:1"),
            ("RANK", "0"),
            ("WORLD_SIZE", "0"),
        ]));
        assert_eq!(var, "WORLD_SIZE");
        let (var, _) = config_var(parse(&[
            ("FERROCX_COMM_ID", "h:1"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "zero"),
        ]));
        assert_eq!(var, "OMPI_COMM_WORLD_LOCAL_RANK");
        // Empty values count as unset.
        let (var, _) = config_var(parse(&[
            ("FERROCX_COMM_ID", " "),
            ("FERROCX_RANK", "0"),
            ("FERROCX_NRANKS", "1"),
        ]));
        assert_eq!(var, "FERROCX_COMM_ID");
    }
}
