//! Network namespaces as hosts: two namespaces joined by veth pairs ("rails"), so
//! that ranks in different namespaces talk over real interfaces, as ranks on two
//! machines would.
//!
//! Rail `i` is a veth pair named `fxr{i}` in both namespaces, with `10.{200+i}.0.1/24`
//! (and `fd00:{i}::1/64`) in host A and `.2` (`::2`) in host B. Loopback is up in both.
//! Every namespace pair has its own network stacks, so tests running in parallel
//! may all use the same addresses and ports.
//!
//! Needs root and `ip` (iproute2). [`Hosts::try_new`] returns the reason when it
//! cannot create them, and a test then prints `skipping: <reason>` and returns
//! ([`hosts_or_skip`]; `FXTEST_REQUIRE_NETNS=1` turns the skip into a failure, for CI).
//! Dropping [`Hosts`] deletes both namespaces (which removes their veths), also
//! when a test panics.

use crate::{clear_selection_env, run_commands, RankOutput};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Host A (index 0): rank 0 and the bootstrap root live here.
pub const A: usize = 0;
/// Host B (index 1).
pub const B: usize = 1;

/// The port rank 0 listens on for the rendezvous (any port is free in a fresh namespace).
pub const ROOT_PORT: u16 = 29500;

/// Interface name of rail `i` in both namespaces.
pub fn rail_ifname(rail: usize) -> String {
    format!("fxr{rail}")
}

/// Longest wait for a link to report its new state.
const LINK_WAIT: Duration = Duration::from_secs(5);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Two namespaces acting as two hosts, joined by `rails` veth pairs.
#[derive(Debug)]
pub struct Hosts {
    names: [String; 2],
    rails: usize,
    ipv6: bool,
    /// Namespaces created so far (deleted on drop, even when setup failed half way).
    created: usize,
}

/// Run `ip ARGS`; the error text has the command and its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Run `ip ARGS` and return its stdout.
fn ip_output(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Hosts {
    /// Create two namespaces joined by `rails` (1..=50) veth pairs. `Err` is the
    /// reason it cannot be done here (not root, no `ip`, namespaces or veths refused),
    /// for the test to print as its skip reason.
    pub fn try_new(rails: usize) -> Result<Self, String> {
        assert!((1..=50).contains(&rails), "rails must be 1..=50");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root (not running as root)".into());
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("`ip -V` failed: {}", o.status)),
            Err(e) => return Err(format!("`ip` (iproute2) is not available: {e}")),
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = format!("fxns{}-{n}", std::process::id());
        let mut h = Hosts {
            names: [format!("{base}a"), format!("{base}b")],
            rails,
            ipv6: true,
            created: 0,
        };
        for i in [A, B] {
            ip(&["netns", "add", &h.names[i]])
                .map_err(|e| format!("cannot create a network namespace: {e}"))?;
            h.created += 1;
            ip(&["-n", &h.names[i], "link", "set", "lo", "up"])?;
        }
        for r in 0..rails {
            let dev = rail_ifname(r);
            ip(&[
                "link",
                "add",
                &dev,
                "netns",
                &h.names[A],
                "type",
                "veth",
                "peer",
                "name",
                &dev,
                "netns",
                &h.names[B],
            ])
            .map_err(|e| format!("cannot create a veth pair: {e}"))?;
            for i in [A, B] {
                let ns = &h.names[i];
                let v4 = format!("{}/24", h.addr(r, i));
                ip(&["-n", ns, "addr", "add", &v4, "dev", &dev])?;
                if h.ipv6 {
                    let v6 = format!("{}/64", h.addr6(r, i));
                    // `nodad`: usable at once, no duplicate address detection wait.
                    if let Err(e) = ip(&["-n", ns, "-6", "addr", "add", &v6, "dev", &dev, "nodad"])
                    {
                        eprintln!("note: no IPv6 in the namespaces: {e}");
                        h.ipv6 = false;
                    }
                }
            }
            for i in [A, B] {
                ip(&["-n", &h.names[i], "link", "set", &dev, "up"])?;
            }
        }
        for r in 0..rails {
            h.wait_link(r, true)?;
        }
        Ok(h)
    }

    /// Namespace name of host `host` ([`A`] or [`B`]).
    pub fn ns(&self, host: usize) -> &str {
        &self.names[host]
    }

    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.rails
    }

    /// Whether the rails also have IPv6 addresses ([`Hosts::addr6`]).
    pub fn ipv6(&self) -> bool {
        self.ipv6
    }

    /// IPv4 address of `host` on rail `rail`: `10.{200+rail}.0.{host+1}`.
    pub fn addr(&self, rail: usize, host: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 200 + rail as u8, 0, host as u8 + 1)
    }

    /// IPv6 address of `host` on rail `rail`: `fd00:{rail}::{host+1}`.
    pub fn addr6(&self, rail: usize, host: usize) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, rail as u16, 0, 0, 0, 0, 0, host as u16 + 1)
    }

    /// The default rendezvous address: host A on rail 0, [`ROOT_PORT`].
    pub fn root(&self) -> String {
        format!("{}:{ROOT_PORT}", self.addr(0, A))
    }

    /// A command that runs `program` inside host `host`'s namespace
    /// (`ip netns exec NS program`; `ip` execs it, so the child's pid is the program's).
    pub fn command(&self, host: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns(host), program]);
        c
    }

    /// Set rail `rail`'s link in host A down or up, and wait (bounded) until A
    /// reports the new state.
    pub fn set_link(&self, rail: usize, up: bool) -> Result<(), String> {
        let dev = rail_ifname(rail);
        let state = if up { "up" } else { "down" };
        ip(&["-n", self.ns(A), "link", "set", &dev, state])?;
        self.wait_link(rail, up)
    }

    /// Take rail `rail` down in host A ([`Hosts::set_link`]).
    pub fn link_down(&self, rail: usize) -> Result<(), String> {
        self.set_link(rail, false)
    }

    /// Bring rail `rail` back up in host A ([`Hosts::set_link`]).
    pub fn link_up(&self, rail: usize) -> Result<(), String> {
        self.set_link(rail, true)
    }

    /// Run `ip -n NS ARGS` in host `host`'s namespace (routes, neighbours, addresses).
    pub fn ip(&self, host: usize, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", self.ns(host)];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Remove the IPv4 address of every rail in both hosts, leaving IPv6 (when
    /// [`Hosts::ipv6`]) as the only family on the rails.
    pub fn remove_ipv4(&self) -> Result<(), String> {
        for r in 0..self.rails {
            for i in [A, B] {
                let v4 = format!("{}/24", self.addr(r, i));
                self.ip(i, &["addr", "del", &v4, "dev", &rail_ifname(r)])?;
            }
        }
        Ok(())
    }

    /// Make `addr` a black hole as seen from `host` on rail `rail`: a permanent
    /// neighbour entry with a MAC address nobody has, so packets to it leave on the
    /// veth and are dropped by the other side (a connect waits, never refused).
    pub fn black_hole(&self, host: usize, rail: usize, addr: Ipv4Addr) -> Result<(), String> {
        self.ip(
            host,
            &[
                "neigh",
                "replace",
                &addr.to_string(),
                "lladdr",
                "02:00:00:00:00:99",
                "nud",
                "permanent",
                "dev",
                &rail_ifname(rail),
            ],
        )
    }

    /// Whether rail `rail` is up with carrier in host `host`.
    pub fn link_is_up(&self, rail: usize, host: usize) -> Result<bool, String> {
        let dev = rail_ifname(rail);
        let out = ip_output(&["-n", self.ns(host), "-o", "link", "show", "dev", &dev])?;
        // `<BROADCAST,MULTICAST,UP,LOWER_UP>`: administratively up and carrier.
        let flags = out
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(f, _)| f.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default();
        Ok(flags.iter().any(|f| f == "UP") && flags.iter().any(|f| f == "LOWER_UP"))
    }

    /// Wait (at most 5 s) until rail `rail` is up with carrier in both hosts
    /// (`up`), or not up in host A (`!up`).
    pub fn wait_link(&self, rail: usize, up: bool) -> Result<(), String> {
        let deadline = Instant::now() + LINK_WAIT;
        loop {
            let now_up = if up {
                self.link_is_up(rail, A)? && self.link_is_up(rail, B)?
            } else {
                !self.link_is_up(rail, A)?
            };
            if now_up {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "rail {rail} ({}) still not {} after {LINK_WAIT:?}",
                    rail_ifname(rail),
                    if up { "up" } else { "down" }
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The command for rank `rank` of `nranks` placed on `host`: `worker args` in
    /// that namespace with `FERROCX_RANK`/`FERROCX_NRANKS`, `FERROCX_HOSTID` = the
    /// namespace name (so the two namespaces count as two hosts),
    /// `FERROCX_COMM_ID` = [`Hosts::root`], `FERROCX_SOCKET_IFNAME=fxr` (every rail),
    /// then `env` (which may override any of these). The local rank is left for
    /// ferrocx to compute.
    pub fn rank_command(
        &self,
        worker: &str,
        host: usize,
        rank: usize,
        nranks: usize,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Command {
        let mut c = self.command(host, worker);
        c.args(args)
            .env("FERROCX_RANK", rank.to_string())
            .env("FERROCX_NRANKS", nranks.to_string())
            .env_remove("FERROCX_LOCAL_RANK")
            .env("FERROCX_HOSTID", self.ns(host))
            .env("FERROCX_COMM_ID", self.root())
            .env("FERROCX_SOCKET_IFNAME", "fxr");
        clear_selection_env(&mut c);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Run one rank per entry of `placement` (rank `r` on host `placement[r]`),
    /// each as [`Hosts::rank_command`], waiting at most `limit`.
    pub fn run_placed(
        &self,
        worker: &str,
        placement: &[usize],
        args: &[&str],
        env: &[(&str, &str)],
        limit: Duration,
    ) -> Vec<RankOutput> {
        let n = placement.len();
        let cmds = placement
            .iter()
            .enumerate()
            .map(|(r, &host)| self.rank_command(worker, host, r, n, args, env))
            .collect();
        run_commands(cmds, limit)
    }
}

/// [`Hosts::try_new`], or `None` after printing `skipping: <reason>` to stderr.
/// With `FXTEST_REQUIRE_NETNS=1` (for CI, which runs as root) a reason to skip
/// is a failure instead.
pub fn hosts_or_skip(rails: usize) -> Option<Hosts> {
    match Hosts::try_new(rails) {
        Ok(h) => Some(h),
        Err(why) if required() => {
            panic!("cannot create network namespaces, and FXTEST_REQUIRE_NETNS=1: {why}")
        }
        Err(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

/// Whether `FXTEST_REQUIRE_NETNS` asks for namespace tests to run, not skip.
pub fn required() -> bool {
    matches!(
        std::env::var("FXTEST_REQUIRE_NETNS").as_deref(),
        Ok("1" | "true" | "yes" | "on")
    )
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for name in &self.names[..self.created] {
            if let Err(e) = ip(&["netns", "delete", name]) {
                eprintln!("warning: cleaning up: {e}");
            }
        }
    }
}
