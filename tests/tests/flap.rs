//! A rail that flaps (issue 17): ranks in two namespaces joined by two veth rails run
//! random collectives and point-to-point exchanges of up to 8 MiB, every element
//! checked, while rail 1's link goes down (longer than the rail timeout, so the
//! rail really fails over) and back up, again and again. The job must finish with
//! every operation verified, no error, and failovers and recoveries in its logs.
//!
//! `FXTEST_FLAPS` (default 24), `FXTEST_FLAP_DOWN_MS` (1500), `FXTEST_FLAP_UP_MS`
//! (1200), `FXTEST_FLAP_RAIL_TIMEOUT` (1s) and `FXTEST_FLAP_RECOVERY` (500ms) set
//! the choreography (`FXTEST_FLAP_IFNAME` the rails, e.g. `=fxr0` for one;
//! `FXTEST_FLAP_MIN_SECS` a least duration, for baselines);
//! `scripts/flap-soak.sh` runs the long version and the baselines. Needs root and
//! iproute2 (see `ferrocx_tests::netns`).

use ferrocx_tests::assert_all_ok;
use ferrocx_tests::netns::{hosts_or_skip, A, B};
use ferrocx_tests::soak::SoakDir;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
/// Each step of the choreography waits at most this long.
const STEP: Duration = Duration::from_secs(90);

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Occurrences of `what` in the log lines of `log`.
fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

#[test]
fn a_flapping_rail_never_stalls_or_corrupts_the_job() {
    let Some(hosts) = hosts_or_skip(2) else {
        return;
    };
    let flaps: usize = knob("FXTEST_FLAPS", 24);
    let down = Duration::from_millis(knob("FXTEST_FLAP_DOWN_MS", 1500));
    let up = Duration::from_millis(knob("FXTEST_FLAP_UP_MS", 1200));
    let rail_timeout: String = knob("FXTEST_FLAP_RAIL_TIMEOUT", "1s".to_string());
    let recovery: String = knob("FXTEST_FLAP_RECOVERY", "500ms".to_string());
    let dir = SoakDir::new("flap");
    let mut env = dir.env(&rail_timeout, &recovery);
    env.push(("FERROCX_TRANSPORTS".into(), "net-socket".into()));
    if let Ok(ifname) = std::env::var("FXTEST_FLAP_IFNAME") {
        env.push(("FERROCX_SOCKET_IFNAME".into(), ifname));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let limit = (down + up) * flaps as u32 + Duration::from_secs(240);
    let t = Instant::now();
    let mut stalls = Vec::new();
    let outs = std::thread::scope(|s| {
        let ranks = s.spawn(|| {
            hosts.run_placed(
                WORKER,
                &[A, B],
                &["mixed-soak", "8388608", "100000", "1"],
                &env,
                limit,
            )
        });
        dir.wait_for("an operation on both rails", STEP, || dir.all_iters(2) >= 1);
        for k in 0..flaps {
            let before = dir.all_iters(2);
            hosts.link_down(1).expect("link down");
            std::thread::sleep(down);
            hosts.link_up(1).expect("link up");
            std::thread::sleep(up);
            // The job keeps running through every flap: it made progress during this one.
            if dir.all_iters(2) == before {
                stalls.push(k);
                dir.wait_for(&format!("progress after flap {k}"), STEP, || {
                    dir.all_iters(2) > before
                });
            }
        }
        // Baselines (no flaps) run this long.
        let min = Duration::from_secs(knob("FXTEST_FLAP_MIN_SECS", 0));
        while t.elapsed() < min {
            std::thread::sleep(Duration::from_millis(100));
        }
        let end = dir.all_iters(2);
        dir.wait_for("operations after the last flap", STEP, || {
            dir.all_iters(2) >= end + 10
        });
        dir.stop();
        ranks.join().expect("rank runner")
    });
    let log = dir.logs();
    let failovers = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains(" failed ("))
        .count();
    let recoveries = count(&log, "recovered after");
    // Each sending end sums up its rails when it closes.
    let summary = |field: &str| -> u64 {
        log.lines()
            .filter(|l| l.contains("closed after"))
            .filter_map(|l| {
                let (before, _) = l.split_once(field)?;
                let n = before.rsplit(' ').next()?.trim_start_matches('(');
                n.parse::<u64>().ok()
            })
            .sum()
    };
    let sent_failovers = summary(" failover(s)");
    eprintln!(
        "{flaps} flaps ({down:?} down, {up:?} up) in {:.1} s: {failovers} warning(s) (failures), \
         {recoveries} recovery(ies); sending ends: {} failover(s), {} recovery(ies), \
         {} failed probe(s), {} chunk(s) = {} bytes resent; flaps without progress: {stalls:?}",
        t.elapsed().as_secs_f64(),
        sent_failovers,
        summary(" recovery(ies)"),
        summary(" failed probe(s)"),
        summary(" chunk(s) ("),
        summary(" bytes) resent"),
    );
    for o in &outs {
        eprintln!("rank {}: {}", o.rank, o.stdout.lines().last().unwrap_or(""));
    }
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains("mixed operations verified"),
            "{}",
            o.stdout
        );
    }
    assert!(
        failovers >= flaps / 2 && recoveries >= flaps / 2 && sent_failovers as usize >= flaps / 2,
        "{flaps} flaps but only {failovers} failovers and {recoveries} recoveries logged:\n{log}"
    );
}
