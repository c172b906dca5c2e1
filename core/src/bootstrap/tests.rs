//! Multi-rank tests: each rank is a thread with its own `Bootstrap` on loopback. Rank 0
//! binds port 0 and hands the port to the others, so parallel tests never collide.

use super::*;
use super::{auth, net, wire};
use std::net::TcpListener;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous for the success paths: the machine may be busy running other tests.
const SLOW: Duration = Duration::from_secs(20);

/// Run `body` on `n` ranks rendezvousing at `host` (port chosen by rank 0); results by rank.
fn run_ranks_at<T: Send + 'static>(
    host: &str,
    n: usize,
    timeout: Duration,
    body: impl Fn(Bootstrap) -> T + Send + Sync + 'static,
) -> Vec<T> {
    run_ranks_full(host, n, timeout, None, move |_, b| body(b))
}

/// [`run_ranks_at`] with every rank holding `secret`, and with rank 0's address passed
/// to `body`.
fn run_ranks_full<T: Send + 'static>(
    host: &str,
    n: usize,
    timeout: Duration,
    secret: Option<JobSecret>,
    body: impl Fn(SocketAddr, Bootstrap) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel::<SocketAddr>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let mut handles = Vec::new();
    for rank in 0..n {
        let (body, tx, rx, host) = (body.clone(), tx.clone(), rx.clone(), host.to_string());
        let secret = secret.clone();
        handles.push(std::thread::spawn(move || {
            let (addr, boot) = if rank == 0 {
                let bound = std::sync::OnceLock::new();
                let report = |addr: SocketAddr| {
                    bound.set(addr).unwrap();
                    for _ in 1..n {
                        tx.send(addr).unwrap();
                    }
                };
                let boot = Bootstrap::init_with(
                    &format!("{host}:0"),
                    0,
                    n,
                    0,
                    timeout,
                    secret.as_ref(),
                    Some(&report),
                );
                // n = 1 binds nothing: no address to report.
                let addr = bound
                    .get()
                    .copied()
                    .unwrap_or(SocketAddr::from(([0; 4], 0)));
                (addr, boot)
            } else {
                let addr = rx
                    .lock()
                    .unwrap()
                    .recv_timeout(SLOW)
                    .expect("rank 0 reports its port");
                let boot = Bootstrap::init(
                    &addr.to_string(),
                    rank,
                    n,
                    rank as i32,
                    timeout,
                    secret.as_ref(),
                );
                (addr, boot)
            };
            body(
                addr,
                boot.unwrap_or_else(|e| panic!("rank {rank}: init failed: {e}")),
            )
        }));
    }
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}

fn run_ranks<T: Send + 'static>(
    n: usize,
    body: impl Fn(Bootstrap) -> T + Send + Sync + 'static,
) -> Vec<T> {
    run_ranks_at("127.0.0.1", n, SLOW, body)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn init_one_two_four_ranks_with_consistent_tables() {
    for n in [1, 2, 4] {
        let out = run_ranks(n, |b| {
            assert_eq!(b.me().rank, b.rank());
            assert_eq!(b.me().pid, std::process::id());
            assert_eq!(b.me().cuda_device, b.rank() as i32);
            (b.rank(), b.nranks(), b.peers().to_vec(), b.comm_hash())
        });
        for (r, (rank, nranks, peers, hash)) in out.iter().enumerate() {
            assert_eq!((*rank, *nranks), (r, n));
            assert_eq!(peers, &out[0].2, "rank {r} has a different table");
            assert_eq!(*hash, out[0].3, "comm_hash differs on rank {r}");
        }
        let peers = &out[0].2;
        for (i, p) in peers.iter().enumerate() {
            assert_eq!(p.rank, i);
            assert_eq!(p.host_hash, host_hash());
            assert_eq!(p.local_rank, i, "one host: local rank == rank");
            assert!(p.addr.ip().is_loopback(), "{}", p.addr);
        }
    }
}

#[test]
fn ipv6_loopback() {
    if TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let out = run_ranks_at("[::1]", 3, SLOW, |b| {
        b.barrier().unwrap();
        let all = b.all_gather(&[b.rank() as u8]).unwrap();
        (b.me().addr, all)
    });
    for (r, (addr, all)) in out.iter().enumerate() {
        assert!(addr.is_ipv6(), "rank {r} listens on {addr}");
        assert_eq!(all, &vec![vec![0], vec![1], vec![2]]);
    }
}

#[test]
fn send_recv_is_fifo_per_tag() {
    run_ranks(3, |b| {
        match b.rank() {
            0 => {
                for m in [&b"a"[..], b"b", b"c"] {
                    b.send(1, 1, m).unwrap();
                }
                b.send(1, 2, b"x").unwrap();
                b.send(1, 3, &[]).unwrap();
                let big: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
                b.send(2, 1, &big).unwrap();
                b.send(0, 9, b"to myself").unwrap();
                assert_eq!(b.recv(0, 9).unwrap(), b"to myself");
            }
            1 => {
                // A later tag can be taken first; each tag keeps its order.
                assert_eq!(b.recv(0, 2).unwrap(), b"x");
                assert_eq!(b.recv(0, 1).unwrap(), b"a");
                assert_eq!(b.recv(0, 3).unwrap(), b"");
                assert_eq!(b.recv(0, 1).unwrap(), b"b");
                assert_eq!(b.recv(0, 1).unwrap(), b"c");
            }
            _ => {
                let big = b.recv(0, 1).unwrap();
                assert_eq!(big.len(), 3 << 20);
                assert!(big.iter().enumerate().all(|(i, &v)| v == (i % 251) as u8));
            }
        }
        // Misuse is an error, not a panic.
        assert!(matches!(b.send(7, 0, b""), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            b.send(0, RESERVED_TAG_BIT | 1, b""),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.recv(0, u64::MAX),
            Err(Error::InvalidArgument(_))
        ));
        b.barrier().unwrap();
    });
}

#[test]
fn all_gather_and_barrier() {
    let out = run_ranks(4, |b| {
        let mut results = Vec::new();
        for round in 0..3u8 {
            let mine = vec![round; b.rank() * 3 + round as usize];
            results.push(b.all_gather(&mine).unwrap());
            b.barrier().unwrap();
        }
        b.barrier().unwrap();
        results
    });
    for (r, results) in out.iter().enumerate() {
        for (round, all) in results.iter().enumerate() {
            let expect: Vec<Vec<u8>> = (0..4).map(|p| vec![round as u8; p * 3 + round]).collect();
            assert_eq!(all, &expect, "rank {r} round {round}");
        }
    }
}

#[test]
fn barrier_waits_for_the_last_rank() {
    let out = run_ranks(3, |b| {
        if b.rank() == 2 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let t = Instant::now();
        b.barrier().unwrap();
        t.elapsed()
    });
    assert!(
        out[0] >= Duration::from_millis(250),
        "rank 0 left the barrier after {:?}",
        out[0]
    );
}

#[test]
fn recv_timeout_is_bounded_and_names_the_peer() {
    let timeout = Duration::from_secs(2);
    run_ranks_at("127.0.0.1", 2, timeout, move |b| {
        if b.rank() == 0 {
            let t = Instant::now();
            let e = b.recv(1, 42).unwrap_err();
            let waited = t.elapsed();
            match &e {
                Error::Timeout {
                    peer: Some(1),
                    after,
                    ..
                } => assert_eq!(*after, timeout),
                e => panic!("expected a timeout naming rank 1, got {e}"),
            }
            assert!(
                e.to_string().contains("rank 1") && e.to_string().contains("tag 42"),
                "{e}"
            );
            assert!(
                waited >= timeout - Duration::from_millis(20)
                    && waited < timeout + Duration::from_secs(2),
                "{waited:?}"
            );
            // Explicit deadline.
            let t = Instant::now();
            let e = b
                .recv_deadline(1, 43, Instant::now() + Duration::from_millis(200))
                .unwrap_err();
            assert!(matches!(e, Error::Timeout { peer: Some(1), .. }), "{e}");
            assert!(t.elapsed() < Duration::from_secs(2));
            b.send(1, 0, b"done").unwrap();
        } else {
            // Stay alive (and silent on tag 42) until rank 0 is done.
            b.recv_deadline(0, 0, Instant::now() + SLOW).unwrap();
        }
    });
}

#[test]
fn crash_is_reported_promptly_but_clean_close_is_not_a_death() {
    run_ranks(3, |b| {
        b.barrier().unwrap();
        match b.rank() {
            0 => {
                let t = Instant::now();
                // Rank 2 crashes while we wait: we must hear of it long before the timeout.
                let e = b.recv(2, 5).unwrap_err();
                assert!(
                    t.elapsed() < Duration::from_secs(5),
                    "took {:?}",
                    t.elapsed()
                );
                match &e {
                    Error::PeerFailed { rank: 2, detail } => {
                        assert!(detail.contains("without saying goodbye"), "{detail}");
                        assert!(
                            detail.contains(&format!("pid {}", std::process::id())),
                            "{detail}"
                        );
                    }
                    e => panic!("expected rank 2 to be reported failed, got {e}"),
                }
                let (dead, what) = b.dead_peer().expect("rank 2 is dead");
                assert_eq!(dead, 2, "{what}");
                // Rank 1 closed cleanly: a recv from it fails at once, but it is no death.
                let e = b.recv(1, 5).unwrap_err();
                assert!(
                    matches!(&e, Error::PeerFailed { rank: 1, detail } if detail.contains("said goodbye")),
                    "{e}"
                );
                assert_eq!(b.dead_peer().map(|d| d.0), Some(2));
                assert!(matches!(
                    b.send(2, 0, b"x"),
                    Err(Error::PeerFailed { rank: 2, .. })
                ));
                // Dropped with a dead peer and a departed one: must not hang.
            }
            1 => b.close(),
            _ => {
                std::thread::sleep(Duration::from_millis(300));
                b.kill_for_test();
            }
        }
    });
}

#[test]
fn abort_notice_reaches_every_rank_and_wakes_waiters() {
    // Test-level sync: once aborted, bootstrap receives fail by design.
    let done = Arc::new(std::sync::Barrier::new(3));
    run_ranks(3, move |b| {
        let fired = Arc::new(AtomicUsize::new(0));
        let f = fired.clone();
        b.set_event_hook(Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        }));
        b.barrier().unwrap();
        if b.rank() == 1 {
            std::thread::sleep(Duration::from_millis(200));
            b.broadcast_abort("CUDA error: out of memory");
            assert_eq!(
                b.abort_notice(),
                None,
                "our own abort is not a notice from a peer"
            );
            // Keep the connections up until the others have seen it.
            done.wait();
            return;
        }
        // Wait on a rank that is alive and silent: the abort must end the wait.
        let other = if b.rank() == 0 { 2 } else { 0 };
        let t = Instant::now();
        let e = b.recv(other, 7).unwrap_err();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
        match &e {
            Error::PeerFailed { rank: 1, detail } => {
                assert!(detail.contains("out of memory"), "{detail}")
            }
            e => panic!("expected the abort from rank 1, got {e}"),
        }
        assert_eq!(
            b.abort_notice(),
            Some((1, "CUDA error: out of memory".to_string()))
        );
        // The hook runs on the reader thread; it may trail the wake-up slightly.
        let t = Instant::now();
        while fired.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(fired.load(Ordering::SeqCst) >= 1, "the event hook fired");
        assert_eq!(b.dead_peer(), None);
        done.wait();
    });
}

#[test]
fn root_that_does_not_exist_times_out_naming_the_address() {
    let root = format!("127.0.0.1:{}", free_port());
    let timeout = Duration::from_secs(1);
    let t = Instant::now();
    let e = Bootstrap::init(&root, 1, 2, 0, timeout, None)
        .err()
        .expect("no root, no bootstrap");
    let took = t.elapsed();
    assert!(matches!(e, Error::Timeout { peer: Some(0), .. }), "{e}");
    assert!(e.to_string().contains(&root), "{e}");
    assert!(
        took >= timeout - Duration::from_millis(20) && took < timeout + Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn silent_root_times_out_waiting_for_the_table() {
    // Something listens but never answers (a hung rank 0, or another program).
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = silent.local_addr().unwrap().to_string();
    let t = Instant::now();
    let e = Bootstrap::init(&root, 1, 2, 0, Duration::from_millis(800), None)
        .err()
        .expect("no table, no bootstrap");
    assert!(matches!(e, Error::Timeout { peer: Some(0), .. }), "{e}");
    assert!(e.to_string().contains(&root), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

/// An earlier job's root on the port, gone with our connection still queued (seen in CI
/// when two jobs drew one port): the rank connects again and meets the real root.
#[test]
fn a_rank_dropped_unheard_by_an_earlier_root_joins_the_real_one() {
    let stale = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = stale.local_addr().unwrap().to_string();
    let job = secret("the job's secret");
    let one = std::thread::spawn({
        let (at, job) = (at.clone(), job.clone());
        move || Bootstrap::init(&at, 1, 2, 0, SLOW, Some(&job))
    });
    // Dropped with its hello unread: the rank sees a reset (or a close).
    let (c, _) = stale.accept().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(c);
    drop(stale);
    std::thread::sleep(Duration::from_millis(200));
    let zero = Bootstrap::init(&at, 0, 2, 0, SLOW, Some(&job)).unwrap();
    let one = one.join().unwrap().unwrap();
    assert_eq!(zero.comm_hash(), one.comm_hash());
    zero.send(1, 3, b"hi").unwrap();
    assert_eq!(one.recv(0, 3).unwrap(), b"hi");
}

/// A root that drops the rank unheard and never comes back is named, within the timeout.
#[test]
fn a_root_gone_after_accepting_is_named() {
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = gone.local_addr().unwrap().to_string();
    let t = Instant::now();
    let rank = std::thread::spawn({
        let at = at.clone();
        move || Bootstrap::init(&at, 1, 2, 0, Duration::from_secs(2), None)
    });
    let (c, _) = gone.accept().unwrap();
    drop(c);
    drop(gone);
    let e = rank.join().unwrap().err().expect("no root, no bootstrap");
    assert!(matches!(e, Error::PeerFailed { rank: 0, .. }), "{e}");
    assert!(
        e.to_string().contains(&at) && e.to_string().contains("dropped the connection"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[test]
fn root_rejects_strays_and_wrong_sizes_but_completes() {
    use std::io::Write;
    let (tx, rx) = mpsc::channel();
    let root = std::thread::spawn(move || {
        let report = move |a: SocketAddr| tx.send(a).unwrap();
        Bootstrap::init_with("127.0.0.1:0", 0, 2, 0, SLOW, None, Some(&report))
    });
    let addr = rx.recv_timeout(SLOW).unwrap();
    // Garbage (an HTTP probe), then a ferrocx rank that believes in another size.
    let mut probe = std::net::TcpStream::connect(addr).unwrap();
    probe
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let e = Bootstrap::init(&addr.to_string(), 1, 3, 0, SLOW, None)
        .err()
        .expect("size mismatch is rejected");
    assert!(
        matches!(&e, Error::Bootstrap(m) if m.contains("expects 3 ranks")),
        "{e}"
    );
    // The real rank 1 still gets in.
    let one = Bootstrap::init(&addr.to_string(), 1, 2, 0, SLOW, None).unwrap();
    let zero = root.join().unwrap().unwrap();
    assert_eq!(zero.comm_hash(), one.comm_hash());
    zero.send(1, 3, b"hi").unwrap();
    assert_eq!(one.recv(0, 3).unwrap(), b"hi");
}

#[test]
fn bad_arguments() {
    assert!(matches!(
        Bootstrap::init("127.0.0.1:1", 0, 0, 0, SLOW, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Bootstrap::init("127.0.0.1:1", 2, 2, 0, SLOW, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Bootstrap::init("no-port", 1, 2, 0, SLOW, None),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn close_is_idempotent_and_ends_waits() {
    run_ranks(2, |b| {
        let b = Arc::new(b);
        b.barrier().unwrap();
        if b.rank() == 0 {
            let waiter = {
                let b = b.clone();
                std::thread::spawn(move || b.recv(1, 1))
            };
            std::thread::sleep(Duration::from_millis(100));
            b.close();
            b.close();
            let r = waiter.join().unwrap();
            assert!(
                matches!(
                    r,
                    Err(Error::Destroyed(_)) | Err(Error::PeerFailed { rank: 1, .. })
                ),
                "{r:?}"
            );
        } else {
            // Outlive rank 0's close so its waiter ends because of the close.
            let r = b.recv(0, 1);
            assert!(matches!(r, Err(Error::PeerFailed { rank: 0, .. })), "{r:?}");
        }
    });
}

#[test]
fn bootstrap_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Bootstrap>();
}

fn secret(s: &str) -> JobSecret {
    JobSecret::new(s).unwrap()
}

/// Start rank 0 of 2 holding `secret` on a port of its own; returns its thread and address.
fn lone_root(
    secret: Option<JobSecret>,
) -> (std::thread::JoinHandle<Result<Bootstrap>>, SocketAddr) {
    let (tx, rx) = mpsc::channel();
    let root = std::thread::spawn(move || {
        let report = move |a: SocketAddr| tx.send(a).unwrap();
        Bootstrap::init_with("127.0.0.1:0", 0, 2, 0, SLOW, secret.as_ref(), Some(&report))
    });
    (root, rx.recv_timeout(SLOW).unwrap())
}

/// The real rank 1 joins after the strays: both ends work.
fn real_rank_completes(
    root: std::thread::JoinHandle<Result<Bootstrap>>,
    addr: SocketAddr,
    secret: Option<&JobSecret>,
) {
    let one = Bootstrap::init(&addr.to_string(), 1, 2, 0, SLOW, secret).unwrap();
    let zero = root.join().unwrap().unwrap();
    assert_eq!(zero.comm_hash(), one.comm_hash());
    zero.send(1, 3, b"hi").unwrap();
    assert_eq!(one.recv(0, 3).unwrap(), b"hi");
    one.send(0, 4, b"ho").unwrap();
    assert_eq!(zero.recv(1, 4).unwrap(), b"ho");
}

#[test]
fn ranks_sharing_a_secret_work() {
    for n in [1, 2, 4] {
        let out = run_ranks_full("127.0.0.1", n, SLOW, Some(secret("s3cret")), |_, b| {
            b.barrier().unwrap();
            (b.all_gather(&[b.rank() as u8]).unwrap(), b.comm_hash())
        });
        for (r, (all, hash)) in out.iter().enumerate() {
            let expect: Vec<Vec<u8>> = (0..n as u8).map(|p| vec![p]).collect();
            assert_eq!(all, &expect, "rank {r} of {n}");
            assert_eq!(*hash, out[0].1);
        }
    }
}

#[test]
fn root_refuses_ranks_without_the_secret_or_with_another_and_completes() {
    let job = secret("the job's secret");
    let (root, addr) = lone_root(Some(job.clone()));
    let at = addr.to_string();
    // No secret: told why, as an auth error (not a timeout).
    let e = Bootstrap::init(&at, 1, 2, 0, SLOW, None)
        .err()
        .expect("no secret, no entry");
    match &e {
        Error::Auth(m) => assert_eq!(
            m,
            &format!(
                "the bootstrap root {at} refused this rank: the bootstrap root has a job secret and this process \
                 has none: set the same FERROCX_SECRET or FERROCX_SECRET_FILE for every rank of the job (fxrun does)"
            )
        ),
        e => panic!("expected Error::Auth, got {e}"),
    }
    // Another secret: the root's answer does not verify here.
    let t = Instant::now();
    let e = Bootstrap::init(&at, 1, 2, 0, SLOW, Some(&secret("another job's")))
        .err()
        .expect("wrong secret, no entry");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    match &e {
        Error::Auth(m) => assert!(
            m.starts_with(&format!(
                "the bootstrap root {at} does not know this rank's job secret: its answer to our challenge is wrong"
            )),
            "{m}"
        ),
        e => panic!("expected Error::Auth, got {e}"),
    }
    assert!(
        e.to_string()
            .starts_with("bootstrap authentication failed: "),
        "{e}"
    );
    // A forger: a well-formed hello with a challenge, then an answer it made up.
    forge_root_answer(addr);
    real_rank_completes(root, addr, Some(&job));
}

/// Speak the protocol to the root without the secret: hello, then a made-up answer.
/// The root must refuse (an `AuthFail`, then the connection closes).
fn forge_root_answer(addr: SocketAddr) {
    let s = std::net::TcpStream::connect(addr).unwrap();
    let me = RankInfo {
        rank: 1,
        pid: 1,
        host_name: "intruder".into(),
        host_hash: 1,
        local_rank: 0,
        cuda_device: -1,
        addr: "127.0.0.1:9".parse().unwrap(),
    };
    let hello = wire::RootHello {
        version: wire::VERSION,
        rank: 1,
        nranks: 2,
        info: me,
        challenge: Some([7; auth::CHALLENGE_LEN]),
    };
    wire::write_frame(&mut &s, wire::Kind::Hello, 0, &hello.encode()).unwrap();
    let by = Instant::now() + SLOW;
    let f = net::read_frame_by(&s, by, wire::MAX_PAYLOAD).unwrap();
    assert_eq!(f.kind, wire::Kind::AuthChallenge);
    wire::write_frame(&mut &s, wire::Kind::AuthAnswer, 0, &[0; auth::ANSWER_LEN]).unwrap();
    let f = net::read_frame_by(&s, by, wire::MAX_PAYLOAD).unwrap();
    assert_eq!(f.kind, wire::Kind::AuthFail);
    let why = String::from_utf8_lossy(&f.payload);
    assert!(why.contains("could not verify"), "{why}");
    assert!(matches!(
        net::read_frame_by(&s, by, wire::MAX_PAYLOAD),
        Err(wire::WireError::Closed)
    ));
}

#[test]
fn secret_on_one_side_only_is_refused_with_a_clear_error() {
    // The rank has a secret, the root none: the rank is told.
    let (root, addr) = lone_root(None);
    let at = addr.to_string();
    let e = Bootstrap::init(&at, 1, 2, 0, SLOW, Some(&secret("mine")))
        .err()
        .expect("mixed is refused");
    assert!(
        matches!(&e, Error::Auth(m) if m.contains("this process has a job secret and the bootstrap root has none")),
        "{e}"
    );
    real_rank_completes(root, addr, None);
}

#[test]
fn a_root_that_cannot_prove_the_secret_is_not_trusted() {
    // Something at the root address that skips the proof (an impostor, or an old root):
    // a rank holding a secret stops at its first answer.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = fake.local_addr().unwrap().to_string();
    let impostor = std::thread::spawn(move || {
        let (s, _) = fake.accept().unwrap();
        net::read_frame_by(&s, Instant::now() + SLOW, wire::MAX_HELLO).unwrap();
        let table = wire::encode_table(1, &[]);
        wire::write_frame(&mut &s, wire::Kind::Table, 0, &table).unwrap();
        // Keep the socket open until the rank gave up.
        let _ = net::read_frame_by(&s, Instant::now() + SLOW, wire::MAX_HELLO);
    });
    let e = Bootstrap::init(&at, 1, 2, 0, SLOW, Some(&secret("mine")))
        .err()
        .expect("no proof, no trust");
    assert!(
        matches!(&e, Error::Auth(m) if m.contains("answered without proving the job secret")),
        "{e}"
    );
    impostor.join().unwrap();
}

#[test]
fn the_root_timeout_names_the_refused_connections() {
    let (tx, rx) = mpsc::channel();
    let job = secret("job");
    let root = std::thread::spawn(move || {
        let report = move |a: SocketAddr| tx.send(a).unwrap();
        Bootstrap::init_with(
            "127.0.0.1:0",
            0,
            2,
            0,
            Duration::from_secs(2),
            Some(&job),
            Some(&report),
        )
    });
    let addr = rx.recv_timeout(SLOW).unwrap();
    let _ = Bootstrap::init(&addr.to_string(), 1, 2, 0, SLOW, Some(&secret("other")));
    let e = root.join().unwrap().err().expect("rank 1 never got in");
    let text = e.to_string();
    assert!(matches!(e, Error::Timeout { peer: Some(1), .. }), "{text}");
    assert!(
        text.contains("missing ranks [1]")
            && text.contains("refused 1 connection: from 127.0.0.1:")
            && text.contains(
                "it claims rank 1 but refused our answer to its challenge: its job secret differs from ours"
            ),
        "{text}"
    );
}
