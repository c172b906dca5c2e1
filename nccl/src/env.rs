//! NCCL's environment variables, for jobs written for NCCL. The environment
//! stays ferrocx's (`FERROCX_*`); an `NCCL_*` variable with a ferrocx meaning
//! sets its `FERROCX_*` counterpart when that one is not set, and one
//! without a ferrocx meaning is reported once, never silently dropped.
//! `docs/NCCL.md` has the table. [`plan`] is pure (tested); [`apply`] acts.

use std::sync::Once;

/// What an `NCCL_*` variable becomes.
#[derive(Clone, Copy)]
enum Meaning {
    /// The same value, under this name.
    Same(&'static str),
    /// `NCCL_DEBUG`: a level, as a log filter.
    DebugLevel,
    /// `1` turns this transport off (`FERROCX_*_DISABLE=1`).
    Disable(&'static str),
    /// `NCCL_NET`: `IB` or `Socket` keeps that network transport only.
    Net,
    /// Not a setting (container images describe themselves with `NCCL_VERSION`).
    NotASetting,
    /// Tunes something ferrocx does not have, or chooses differently: reported,
    /// except when the value only turns off a feature ferrocx lacks anyway.
    Ignored {
        why: &'static str,
        quiet_if: &'static str,
    },
}

const TABLE: &[(&str, Meaning)] = &[
    ("NCCL_DEBUG", Meaning::DebugLevel),
    ("NCCL_DEBUG_FILE", Meaning::Same("FERROCX_DEBUG_FILE")),
    ("NCCL_COMM_ID", Meaning::Same("FERROCX_COMM_ID")),
    ("NCCL_HOSTID", Meaning::Same("FERROCX_HOSTID")),
    ("NCCL_SOCKET_IFNAME", Meaning::Same("FERROCX_SOCKET_IFNAME")),
    ("NCCL_IB_HCA", Meaning::Same("FERROCX_IB_HCA")),
    ("NCCL_IB_GID_INDEX", Meaning::Same("FERROCX_IB_GID_INDEX")),
    ("NCCL_IB_TIMEOUT", Meaning::Same("FERROCX_IB_TIMEOUT")),
    ("NCCL_IB_RETRY_CNT", Meaning::Same("FERROCX_IB_RETRY_CNT")),
    ("NCCL_P2P_DISABLE", Meaning::Disable("FERROCX_P2P_DISABLE")),
    ("NCCL_SHM_DISABLE", Meaning::Disable("FERROCX_SHM_DISABLE")),
    ("NCCL_IB_DISABLE", Meaning::Disable("FERROCX_IB_DISABLE")),
    ("NCCL_NET", Meaning::Net),
    ("NCCL_VERSION", Meaning::NotASetting),
    (
        "NCCL_DEBUG_SUBSYS",
        Meaning::Ignored {
            why: "filter the log with FERROCX_DEBUG (e.g. info,ferrocx::plugin=debug)",
            quiet_if: "",
        },
    ),
    (
        "NCCL_ALGO",
        Meaning::Ignored {
            why: "ferrocx chooses by size; FERROCX_ALGO forces one",
            quiet_if: "",
        },
    ),
    (
        "NCCL_PROTO",
        Meaning::Ignored {
            why: "ferrocx has no LL/LL128/Simple protocols",
            quiet_if: "",
        },
    ),
    (
        "NCCL_BUFFSIZE",
        Meaning::Ignored {
            why: "see FERROCX_SHM_CHUNK_SIZE and FERROCX_SOCKET_CHUNK_SIZE",
            quiet_if: "",
        },
    ),
    (
        "NCCL_MIN_NCHANNELS",
        Meaning::Ignored {
            why: "ferrocx's channels are connections: FERROCX_NCHANNELS",
            quiet_if: "",
        },
    ),
    (
        "NCCL_MAX_NCHANNELS",
        Meaning::Ignored {
            why: "ferrocx's channels are connections: FERROCX_NCHANNELS",
            quiet_if: "",
        },
    ),
    (
        "NCCL_NTHREADS",
        Meaning::Ignored {
            why: "ferrocx launches no communication kernels",
            quiet_if: "",
        },
    ),
    (
        "NCCL_SOCKET_NTHREADS",
        Meaning::Ignored {
            why: "see FERROCX_SOCKET_NSOCKS",
            quiet_if: "",
        },
    ),
    (
        "NCCL_NSOCKS_PERTHREAD",
        Meaning::Ignored {
            why: "see FERROCX_SOCKET_NSOCKS",
            quiet_if: "",
        },
    ),
    (
        "NCCL_NET_PLUGIN",
        Meaning::Ignored {
            why: "ferrocx loads its own plugins: FERROCX_PLUGINS",
            quiet_if: "none",
        },
    ),
    (
        "NCCL_TUNER_PLUGIN",
        Meaning::Ignored {
            why: "ferrocx has no tuner plugins",
            quiet_if: "none",
        },
    ),
    (
        "NCCL_NET_GDR_LEVEL",
        Meaning::Ignored {
            why: "ferrocx decides GPU-direct per transport",
            quiet_if: "",
        },
    ),
    (
        "NCCL_P2P_LEVEL",
        Meaning::Ignored {
            why: "p2p is used whenever CUDA IPC works; FERROCX_P2P_DISABLE=1 turns it off",
            quiet_if: "",
        },
    ),
    (
        "NCCL_NVLS_ENABLE",
        Meaning::Ignored {
            why: "ferrocx does not use NVLink SHARP",
            quiet_if: "0",
        },
    ),
    (
        "NCCL_COLLNET_ENABLE",
        Meaning::Ignored {
            why: "ferrocx has no CollNet",
            quiet_if: "0",
        },
    ),
    (
        "NCCL_CUMEM_ENABLE",
        Meaning::Ignored {
            why: "ferrocx maps peers' memory through CUDA IPC handles",
            quiet_if: "",
        },
    ),
    (
        "NCCL_LAUNCH_MODE",
        Meaning::Ignored {
            why: "ferrocx launches no communication kernels",
            quiet_if: "",
        },
    ),
    (
        "NCCL_CROSS_NIC",
        Meaning::Ignored {
            why: "net-socket and net-ib pick rails themselves",
            quiet_if: "",
        },
    ),
    (
        "NCCL_IB_QPS_PER_CONNECTION",
        Meaning::Ignored {
            why: "net-ib opens one QP per rail",
            quiet_if: "",
        },
    ),
];

/// What to do with an environment: variables to set, and notes to log.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// `(FERROCX_X, value)` to set (each one unset now), and `CUDA_MODULE_LOADING=EAGER`
    /// when it is unset.
    pub set: Vec<(String, String)>,
    /// Warnings, one per variable that has no effect.
    pub warn: Vec<String>,
}

/// `NCCL_DEBUG`'s level as a `FERROCX_DEBUG` filter.
fn debug_filter(level: &str) -> Option<&'static str> {
    Some(match level.trim().to_ascii_uppercase().as_str() {
        "VERSION" | "WARN" | "ABORT" => "warn",
        "INFO" => "info",
        "TRACE" => "trace",
        _ => return None,
    })
}

/// The plan for environment `vars` (every variable, any order).
pub fn plan(vars: &[(String, String)]) -> Plan {
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut p = Plan::default();
    let set = |p: &mut Plan, from: &str, to: &str, value: String| match get(to) {
        Some(mine) if mine != value => p.warn.push(format!(
            "{from} is ignored: {to}={mine} is set (ferrocx's own variable wins)"
        )),
        Some(_) => {}
        None => {
            if !p.set.iter().any(|(k, _)| k == to) {
                p.set.push((to.to_string(), value));
            }
        }
    };
    // Lazy module loading deadlocks a ferrocx device operation in flight against
    // the application's first launch of a kernel (docs/ENV.md, CUDA_MODULE_LOADING),
    // and PyTorch asks for it when nothing is set. Loaded before CUDA starts (as a
    // preloaded libnccl.so.2 is), the drop-in asks for eager loading first; a
    // value the user set is kept.
    if get("CUDA_MODULE_LOADING").is_none() {
        p.set.push(("CUDA_MODULE_LOADING".into(), "EAGER".into()));
    }
    let mut names: Vec<&(String, String)> = vars
        .iter()
        .filter(|(n, _)| n.starts_with("NCCL_"))
        .collect();
    names.sort();
    for (name, value) in names {
        match TABLE.iter().find(|(n, _)| n == name).map(|(_, m)| *m) {
            Some(Meaning::Same(to)) => set(&mut p, name, to, value.clone()),
            Some(Meaning::DebugLevel) => match debug_filter(value) {
                Some(f) => set(&mut p, name, "FERROCX_DEBUG", f.to_string()),
                None => p.warn.push(format!(
                    "NCCL_DEBUG={value} is not a level (VERSION, WARN, INFO, TRACE): ignored"
                )),
            },
            Some(Meaning::Disable(to)) => {
                if value.trim() == "1" {
                    set(&mut p, name, to, "1".into());
                }
            }
            Some(Meaning::Net) => match value.trim().to_ascii_lowercase().as_str() {
                "ib" => set(&mut p, name, "FERROCX_SOCKET_DISABLE", "1".into()),
                "socket" => set(&mut p, name, "FERROCX_IB_DISABLE", "1".into()),
                _ => p.warn.push(format!(
                    "NCCL_NET={value} is ignored: ferrocx's networks are IB (net-ib) and Socket (net-socket)"
                )),
            },
            Some(Meaning::NotASetting) => {}
            Some(Meaning::Ignored { why, quiet_if }) => {
                if quiet_if.is_empty() || value.trim() != quiet_if {
                    p.warn.push(format!("{name}={value} has no effect on ferrocx: {why}"));
                }
            }
            None => p.warn.push(format!(
                "{name}={value} has no effect on ferrocx (not one of the NCCL variables it reads; docs/NCCL.md lists them)"
            )),
        }
    }
    p
}

/// Set what the environment's `NCCL_*` variables mean. Runs when the library
/// is loaded (the process is normally still single-threaded then: setting
/// variables later races with C code reading them) and again before the
/// first communicator (for variables a program sets itself after loading).
pub fn apply() {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    for (k, v) in plan(&vars).set {
        std::env::set_var(k, v);
    }
}

/// [`apply`] once more and log, once, the variables that have no effect
/// (after the log is set up, which reads `FERROCX_DEBUG`).
pub fn prepare() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        apply();
        ferrocx::log::init();
        let vars: Vec<(String, String)> = std::env::vars().collect();
        for w in plan(&vars).warn {
            tracing::warn!(target: "ferrocx::nccl", "{w}");
        }
        if std::env::var("NCCL_DEBUG").is_ok_and(|v| v.trim().eq_ignore_ascii_case("VERSION")) {
            eprintln!("{}", crate::banner());
        }
    });
}

/// Runs [`apply`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = {
    extern "C" fn on_load() {
        apply();
    }
    on_load
};

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nccl_variables_set_their_ferrocx_counterparts_unless_those_are_set() {
        let p = plan(&env(&[
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_SOCKET_IFNAME", "=eth0"),
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SHM_DISABLE", "0"),
            ("NCCL_NET", "Socket"),
            ("NCCL_COMM_ID", "10.0.0.1:5000"),
            ("FERROCX_COMM_ID", "10.0.0.2:6000"),
            ("CUDA_MODULE_LOADING", "LAZY"),
        ]));
        let set: Vec<(&str, &str)> = p
            .set
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            set,
            [
                ("FERROCX_DEBUG", "info"),
                ("FERROCX_IB_DISABLE", "1"),
                ("FERROCX_P2P_DISABLE", "1"),
                ("FERROCX_SOCKET_IFNAME", "=eth0"),
            ]
        );
        assert_eq!(p.warn.len(), 1, "{:?}", p.warn);
        assert!(p.warn[0].contains("NCCL_COMM_ID is ignored: FERROCX_COMM_ID=10.0.0.2:6000"));
    }

    #[test]
    fn module_loading_becomes_eager_unless_the_user_chose() {
        let p = plan(&env(&[("NCCL_DEBUG", "WARN")]));
        assert!(
            p.set
                .contains(&("CUDA_MODULE_LOADING".into(), "EAGER".into())),
            "{:?}",
            p.set
        );
        let p = plan(&env(&[("CUDA_MODULE_LOADING", "LAZY")]));
        assert!(p.set.is_empty(), "{:?}", p.set);
    }

    #[test]
    fn variables_without_a_ferrocx_meaning_are_reported_unless_they_turn_off_what_is_absent() {
        let p = plan(&env(&[
            ("CUDA_MODULE_LOADING", "EAGER"),
            ("NCCL_PROTO", "LL128"),
            ("NCCL_NVLS_ENABLE", "0"),
            ("NCCL_COLLNET_ENABLE", "1"),
            ("NCCL_SOMETHING_NEW", "x"),
            ("NCCL_DEBUG", "LOUD"),
            ("NCCL_NET", "Mystery"),
            ("NOT_NCCL", "1"),
            ("NCCL_VERSION", "2.28.3-1"),
        ]));
        assert!(p.set.is_empty());
        let w = p.warn.join("\n");
        assert_eq!(p.warn.len(), 5, "{w}");
        for needle in [
            "NCCL_PROTO=LL128 has no effect",
            "NCCL_COLLNET_ENABLE=1 has no effect",
            "NCCL_SOMETHING_NEW=x has no effect",
            "NCCL_DEBUG=LOUD is not a level",
            "NCCL_NET=Mystery is ignored",
        ] {
            assert!(w.contains(needle), "{needle} missing in {w}");
        }
        assert!(!w.contains("NVLS"), "{w}");
    }
}
