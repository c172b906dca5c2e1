//! Network namespaces as hosts (issue 4, cross-host transport): ranks in two
//! namespaces joined by veth pairs ("rails"), each namespace its own host by
//! `FERROCX_HOSTID`, so net-socket carries every byte between them over real
//! interfaces while shm keeps the pairs inside one namespace.
//!
//! Needs root and iproute2; without them every test prints `skipping: <reason>`
//! and passes (`FXTEST_REQUIRE_NETNS=1` makes that a failure). See
//! `ferrocx_tests::netns`.

use ferrocx_tests::netns::{hosts_or_skip, Hosts, A, B, ROOT_PORT};
use ferrocx_tests::{assert_all_ok, RankOutput};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const LIMIT: Duration = Duration::from_secs(120);

/// `(from, to, transport)` of every `ferrocx::select` choice a rank logged at `info`:
/// `... ferrocx::select: rank 1 -> rank 3: transport net-socket (scores: ...)`.
fn choices(stderr: &str) -> Vec<(usize, usize, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.split_once("ferrocx::select: rank ")?.1;
            let (from, rest) = rest.split_once(" -> rank ")?;
            let (to, rest) = rest.split_once(": transport ")?;
            let t = rest.split_whitespace().next()?;
            Some((from.parse().ok()?, to.parse().ok()?, t.to_string()))
        })
        .collect()
}

/// Every rank chose, for every peer, shm when both share a namespace and
/// net-socket otherwise; and logged at least one choice per peer.
fn assert_transports(outs: &[RankOutput], placement: &[usize]) {
    for o in outs {
        let got = choices(&o.stderr);
        for (peer, &host) in placement.iter().enumerate() {
            if peer == o.rank {
                continue;
            }
            let want = if host == placement[o.rank] {
                "shm"
            } else {
                "net-socket"
            };
            let to_peer: Vec<&String> = got
                .iter()
                .filter(|(f, t, _)| *f == o.rank && *t == peer)
                .map(|(_, _, tr)| tr)
                .collect();
            assert!(
                !to_peer.is_empty() && to_peer.iter().all(|t| *t == want),
                "rank {} -> rank {peer}: expected {want}, logged {to_peer:?}\n{}",
                o.rank,
                o.stderr
            );
        }
    }
}

fn assert_passed(outs: &[RankOutput], needle: &str) {
    assert_all_ok(outs);
    for o in outs {
        assert!(
            o.stdout.contains("PASS") && o.stdout.contains(needle),
            "rank {}: no '{needle}':\n{}",
            o.rank,
            o.stdout
        );
    }
}

/// The whole collective matrix (every collective × type × operator × size × root ×
/// placement × forced algorithm, each result checked against the model, then barriers).
fn matrix(hosts: &Hosts, placement: &[usize], filter: Option<&str>, env: &[(&str, &str)]) {
    let mut args = vec!["coll-matrix"];
    if let Some(f) = filter {
        args.extend(["--filter", f]);
    }
    let mut vars = vec![("FERROCX_DEBUG", "info"), ("FERROCX_TIMEOUT", "30")];
    vars.extend_from_slice(env);
    let t = Instant::now();
    let outs = hosts.run_placed(WORKER, placement, &args, &vars, LIMIT);
    eprintln!(
        "coll-matrix on {} ranks placed {placement:?} (rails: {}, filter {filter:?}): {:.1} s",
        placement.len(),
        hosts.rails(),
        t.elapsed().as_secs_f64()
    );
    // What net-socket says it uses (interfaces, rails), for the record.
    for l in outs[0].stderr.lines().filter(|l| l.contains("net-socket:")) {
        eprintln!("  rank 0: {}", l.split_once("INFO ").map_or(l, |x| x.1));
    }
    assert_passed(&outs, "collective cases verified");
    assert_transports(&outs, placement);
}

#[test]
fn every_collective_2_ranks_in_2_namespaces_over_2_rails() {
    let Some(hosts) = hosts_or_skip(2) else {
        return;
    };
    matrix(&hosts, &[A, B], None, &[]);
}

#[test]
fn every_collective_4_ranks_in_2_namespaces_shm_inside_net_socket_between() {
    let Some(hosts) = hosts_or_skip(2) else {
        return;
    };
    matrix(&hosts, &[A, A, B, B], None, &[]);
}

#[test]
fn ipv6_only_rails_carry_bootstrap_and_collectives() {
    let Some(hosts) = hosts_or_skip(1) else {
        return;
    };
    if !hosts.ipv6() {
        eprintln!("skipping: IPv6 addresses cannot be added in the namespaces here");
        return;
    }
    // With the IPv4 addresses gone, the rendezvous, the mesh and net-socket can
    // only use fd00:0::/64.
    hosts.remove_ipv4().expect("remove the IPv4 addresses");
    let root = format!("[{}]:{ROOT_PORT}", hosts.addr6(0, A));
    matrix(
        &hosts,
        &[A, B],
        Some("dtype=float "),
        &[("FERROCX_COMM_ID", &root)],
    );
}

#[test]
fn large_sendrecv_across_namespaces_is_verified() {
    let Some(hosts) = hosts_or_skip(2) else {
        return;
    };
    let t = Instant::now();
    let outs = hosts.run_placed(
        WORKER,
        &[A, B],
        &[
            "pairs",
            "67108864,67108863,1048579,1,0",
            "--expect-transport",
            "net-socket",
        ],
        &[("FERROCX_TIMEOUT", "60")],
        LIMIT,
    );
    eprintln!(
        "64 MiB pairs across namespaces: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_passed(&outs, "verified with every peer via [\"net-socket\"]");
}

/// Rank 1 alone in host B, its `FERROCX_COMM_ID` pointing at `root`, where no
/// rank 0 will ever answer: it must fail after `FERROCX_TIMEOUT` (3 s) with an
/// error that says it timed out and names `root`.
fn unreachable_root(hosts: &Hosts, root: &str, why: &str) {
    let t = Instant::now();
    let outs = ferrocx_tests::run_commands(
        vec![hosts.rank_command(
            WORKER,
            B,
            1,
            2,
            &["pairs", "1"],
            &[("FERROCX_COMM_ID", root), ("FERROCX_TIMEOUT", "3")],
        )],
        Duration::from_secs(60),
    );
    let took = t.elapsed();
    let o = &outs[0];
    eprintln!(
        "{why}: exit {:?} after {took:?}: {}",
        o.code,
        o.stdout.trim()
    );
    assert!(
        o.code.is_some() && !o.ok(),
        "{why}: expected a non-zero exit, got {:?}\n{}\n{}",
        o.code,
        o.stdout,
        o.stderr
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(13),
        "{why}: exited after {took:?}, expected FERROCX_TIMEOUT (3 s) plus a little"
    );
    let msg = o.stdout.clone() + &o.stderr;
    assert!(
        msg.contains("timed out after 3.0s") && msg.contains(root),
        "{why}: the error should say it timed out and name {root}:\n{msg}"
    );
}

#[test]
fn unreachable_bootstrap_root_times_out_naming_the_address() {
    let Some(hosts) = hosts_or_skip(1) else {
        return;
    };
    // Host A is up, but nothing listens on the port: every connect is refused.
    unreachable_root(&hosts, &hosts.root(), "refused");
    // An address whose packets vanish: connects hang until the deadline.
    let hole = Ipv4Addr::new(10, 200, 0, 99);
    hosts.black_hole(B, 0, hole).expect("black-hole route");
    unreachable_root(&hosts, &format!("{hole}:{ROOT_PORT}"), "black hole");
}

#[test]
fn the_fixture_sets_links_down_and_up_and_cleans_up() {
    let names;
    {
        let Some(hosts) = hosts_or_skip(2) else {
            return;
        };
        names = [hosts.ns(A).to_string(), hosts.ns(B).to_string()];
        for r in 0..2 {
            assert!(hosts.link_is_up(r, A).unwrap() && hosts.link_is_up(r, B).unwrap());
        }
        hosts.link_down(1).expect("link down");
        assert!(!hosts.link_is_up(1, A).unwrap());
        // The peer end loses its carrier.
        assert!(!hosts.link_is_up(1, B).unwrap());
        assert!(hosts.link_is_up(0, A).unwrap());
        hosts.link_up(1).expect("link up");
        assert!(hosts.link_is_up(1, A).unwrap() && hosts.link_is_up(1, B).unwrap());
    }
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    for n in &names {
        assert!(
            !list.lines().any(|l| l.split_whitespace().next() == Some(n)),
            "namespace {n} left behind:\n{list}"
        );
    }
}
