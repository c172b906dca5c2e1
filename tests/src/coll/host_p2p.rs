//! Host-memory sends and receives that a collective plugin takes (`shm-coll`
//! takes those of at most `FERROCX_SHM_COLL_P2P_BYTES`, 64 KiB by default, on
//! one host) mixed with those the core's transports carry.
//!
//! `host-p2p ROUNDS EXPECT`: every rank draws the same random messages per
//! round (sizes on both sides of the limit, every pair of ranks, runs of more
//! small messages to one peer than a ring holds) and moves them as one group,
//! as an asynchronous group (`launch`, then `wait`), or one blocking call per
//! message in the common order — each rank picking its own way, so the two
//! ends of a message are often posted differently; every byte is checked. `EXPECT` is who must run
//! a message of the limit, as `Communicator::host_p2p_runner` says (`shm-coll` or
//! `core`), so the test knows which path it ran.
//!
//! `host-p2p-size`: a receive of another size fails alone with the core's
//! wording, and the communicator stays usable.

use super::{e2s, hash};
use ferrocx::{Communicator, Error};

/// shm-coll's default limit (`FERROCX_SHM_COLL_P2P_BYTES`; at up to 16
/// ranks the rings' memory budget does not shrink it).
const LIMIT: usize = 64 << 10;

/// Sizes drawn: around the default limit, empty, a cache line, the old
/// limit, one larger message for the core.
const SIZES: &[usize] = &[
    0,
    1,
    8,
    63,
    64,
    100,
    4096,
    LIMIT - 1,
    LIMIT,
    LIMIT + 1,
    100_000,
];

/// One message: from, to, bytes.
type Msg = (usize, usize, usize);

fn byte(round: u64, k: usize, i: usize) -> u8 {
    hash(&[round, k as u64, i as u64]) as u8
}

/// Round `round`'s messages, the same on every rank.
fn messages(round: u64, n: usize) -> Vec<Msg> {
    let mut out = Vec::new();
    let count = 1 + (hash(&[round, 1]) % 24) as usize;
    for k in 0..count {
        let h = hash(&[round, 2, k as u64]);
        let from = (h % n as u64) as usize;
        let to = (from + 1 + ((h >> 8) % (n as u64 - 1)) as usize) % n;
        out.push((from, to, SIZES[((h >> 16) % SIZES.len() as u64) as usize]));
    }
    // Every third round, more small messages to one peer than a ring holds.
    if round % 3 == 2 {
        for _ in 0..20 {
            out.push((0, 1, 8));
        }
    }
    out
}

/// How a round posts its operations.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Every op of the rank in one group.
    Group,
    /// Every op of the rank in one group started with `launch`, then waited on.
    Async,
    /// One blocking send or receive per message, in the messages' order.
    Blocking,
}

pub fn run(rounds: u64, expect: &str) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    if n < 2 {
        return Err("needs 2 ranks or more".into());
    }
    // The path a message of the limit takes, and that sizes above the limit
    // never take a plugin.
    let peer = (me + 1) % n;
    let small = comm.host_p2p_runner(true, LIMIT, peer).map_err(e2s)?;
    if small != expect {
        return Err(format!(
            "a {LIMIT}-byte send runs on {small}, expected {expect}"
        ));
    }
    let large = comm.host_p2p_runner(false, LIMIT + 1, peer).map_err(e2s)?;
    if large != "core" {
        return Err(format!(
            "a {}-byte receive runs on {large}, expected the core",
            LIMIT + 1
        ));
    }
    // No connection is made ahead: the rounds' groups make them as they go,
    // with ops on the connections made meanwhile (docs/ARCHITECTURE.md,
    // Connections: an order that once left ranks waiting on each other).
    let mut moved = [0usize; 2]; // messages at most the limit, larger
    for round in 0..rounds {
        let msgs = messages(round, n);
        let mode =
            [Mode::Group, Mode::Async, Mode::Blocking][(hash(&[round, 3, me as u64]) % 3) as usize];
        let sends: Vec<(usize, Vec<u8>)> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.0 == me)
            .map(|(k, &(_, _, b))| (k, (0..b).map(|i| byte(round, k, i)).collect()))
            .collect();
        let mut recvs: Vec<(usize, Vec<u8>)> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.1 == me)
            .map(|(k, &(_, _, b))| (k, vec![0xA5; b]))
            .collect();
        let to = |k: usize| msgs[k].1;
        let from = |k: usize| msgs[k].0;
        let fail = |e: Error| format!("round {round} ({mode:?}): {e}");
        match mode {
            Mode::Group => {
                let mut g = comm.group_start();
                for (k, s) in &sends {
                    g.send(s, to(*k)).map_err(fail)?;
                }
                for (k, r) in recvs.iter_mut() {
                    g.recv(r, from(*k)).map_err(fail)?;
                }
                g.group_end().map_err(fail)?;
            }
            Mode::Async => {
                let mut g = comm.group_start();
                for (k, r) in recvs.iter_mut() {
                    g.recv(r, from(*k)).map_err(fail)?;
                }
                for (k, s) in &sends {
                    g.send(s, to(*k)).map_err(fail)?;
                }
                // SAFETY: the buffers outlive the request, waited on here.
                let req = unsafe { g.launch() }.map_err(fail)?;
                req.wait().map_err(fail)?;
            }
            Mode::Blocking => {
                let (mut si, mut ri) = (0, 0);
                for &(f, t, _) in &msgs {
                    if f == me {
                        comm.send(&sends[si].1, t).map_err(fail)?;
                        si += 1;
                    }
                    if t == me {
                        comm.recv(&mut recvs[ri].1, f).map_err(fail)?;
                        ri += 1;
                    }
                }
            }
        }
        for (k, r) in &recvs {
            if let Some(i) = (0..r.len()).find(|&i| r[i] != byte(round, *k, i)) {
                return Err(format!(
                    "round {round} ({mode:?}): message {k} ({} bytes from rank {}) wrong at byte {i}",
                    r.len(),
                    from(*k)
                ));
            }
            moved[usize::from(r.len() > LIMIT)] += 1;
        }
    }
    // The plugin's path and the core's met collectives in between: one more
    // all-reduce checks the communicator is whole.
    let mut x = vec![1u32; 4];
    let send = x.clone();
    comm.all_reduce(&send, &mut x, ferrocx::RedOp::Sum)
        .map_err(e2s)?;
    if x != vec![n as u32; 4] {
        return Err(format!("all_reduce after the rounds: {x:?}"));
    }
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "{rounds} rounds: received {} messages of at most {LIMIT} bytes ({small}) and {} larger (core), every byte right",
        moved[0], moved[1]
    ))
}

pub fn size_mismatch() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    let runner = comm
        .host_p2p_runner(me == 0, 100, 1 - me.min(1))
        .map_err(e2s)?;
    if runner != "shm-coll" {
        return Err(format!(
            "a 100-byte message runs on {runner}, expected shm-coll"
        ));
    }
    let r = match me {
        0 => comm.send(&[7u8; 100], 1),
        1 => comm.recv(&mut [0u8; 50], 0),
        _ => Ok(()),
    };
    let what = match (me, r) {
        (1, Err(Error::InvalidArgument(m)))
            if m == "mismatched sizes: rank 0 sent 100 bytes but rank 1 posted a receive of 50 bytes" =>
        {
            m
        }
        (1, r) => return Err(format!("rank 1 expected the size error, got {r:?}")),
        (_, Ok(())) => "sent".to_string(),
        (_, Err(e)) => return Err(format!("rank {me}: {e}")),
    };
    // Still usable: the next message pairs with the next receive.
    match me {
        0 => comm.send(&[9u8; 64], 1).map_err(e2s)?,
        1 => {
            let mut b = [0u8; 64];
            comm.recv(&mut b, 0).map_err(e2s)?;
            if b != [9u8; 64] {
                return Err(format!("the message after the error: {b:?}"));
            }
        }
        _ => {}
    }
    comm.barrier().map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok(format!("SIZE {what}"))
}

/// `host-p2p-lazy` (4 ranks): a group whose connections are made while a
/// peer blocks on it (docs/ARCHITECTURE.md, Connections). Messages m1 = 2 → 0,
/// m2 = 0 → 1, m3 = 1 → 2, all above the rings' limit and the first on their
/// pairs: ranks 0 and 1 make blocking calls in that order, rank 2 posts m1
/// and m3 in one group. m1 must leave before m3's connection exists (rank 1
/// posts m3 only after m2, which waits for m1): when a group's ops waited for
/// all its connections, the ranks hung until the timeout.
pub fn lazy_connections() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    if comm.nranks() != 4 {
        return Err("needs 4 ranks".into());
    }
    let size = LIMIT + 1;
    let msg = |k: u8| vec![k; size];
    let mut got = vec![0u8; size];
    match me {
        0 => {
            comm.recv(&mut got, 2).map_err(e2s)?;
            comm.send(&msg(2), 1).map_err(e2s)?;
        }
        1 => {
            comm.recv(&mut got, 0).map_err(e2s)?;
            comm.send(&msg(3), 2).map_err(e2s)?;
        }
        2 => {
            let m1 = msg(1);
            let mut g = comm.group_start();
            g.send(&m1, 0).map_err(e2s)?;
            g.recv(&mut got, 1).map_err(e2s)?;
            g.group_end().map_err(e2s)?;
        }
        _ => {}
    }
    // Rank 0 receives m1, rank 1 m2, rank 2 m3.
    if me < 3 && got != msg(me as u8 + 1) {
        return Err(format!("rank {me} received wrong bytes"));
    }
    comm.barrier().map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok("LAZY every message arrived".into())
}

/// `host-p2p-two-comms` (3 ranks): a valid program whose receive started on
/// one communicator is met only after this rank's send on another. Rank 0
/// starts a receive from 1 and a send to 2 on `c1` (neither waited for),
/// then sends to 1 on `c2` (a split of `c1`), then waits; rank 1 receives
/// from 0 on `c2`, then sends to 0 on `c1`; rank 2 receives from 0 on `c1`.
/// Every message is above the rings' limit and the first on its connection.
/// When a started call returned only once its connections existed, or the
/// service thread made one call's connections at a time, rank 0 waited in
/// its first (or second) call for rank 1, which waited for rank 0's third:
/// both hung until the timeout.
pub fn two_comms() -> Result<String, String> {
    let c1 = Communicator::from_env().map_err(e2s)?;
    let me = c1.rank();
    if c1.nranks() != 3 {
        return Err("needs 3 ranks".into());
    }
    let c2 = c1
        .split(0, me as i32)
        .map_err(e2s)?
        .ok_or("split gave no communicator")?;
    let size = LIMIT + 1;
    let msg = |k: u8| vec![k; size];
    let mut got = vec![0u8; size];
    let expect = match me {
        0 => {
            let (to1, to2) = (msg(1), msg(2));
            let mut g = c1.group_start();
            g.recv(&mut got, 1).map_err(e2s)?;
            // SAFETY: the buffers outlive the request, waited for below.
            let r1 = unsafe { g.launch() }.map_err(e2s)?;
            let mut g = c1.group_start();
            g.send(&to2, 2).map_err(e2s)?;
            // SAFETY: as above.
            let r2 = unsafe { g.launch() }.map_err(e2s)?;
            c2.send(&to1, 1).map_err(e2s)?;
            r1.wait().map_err(e2s)?;
            r2.wait().map_err(e2s)?;
            msg(3)
        }
        1 => {
            c2.recv(&mut got, 0).map_err(e2s)?;
            c1.send(&msg(3), 0).map_err(e2s)?;
            msg(1)
        }
        _ => {
            c1.recv(&mut got, 0).map_err(e2s)?;
            msg(2)
        }
    };
    if got != expect {
        return Err(format!("rank {me} received wrong bytes"));
    }
    c2.destroy().map_err(e2s)?;
    c1.barrier().map_err(e2s)?;
    c1.destroy().map_err(e2s)?;
    Ok("TWO-COMMS every message arrived".into())
}

/// `host-p2p-setup-death` (3 ranks): rank 2's group sends m1 (above the
/// rings' limit) to rank 0 and receives from rank 1, both on new
/// connections; rank 0 takes m1 and dies; rank 1 never sends. Rank 2's wait
/// for rank 1's connection request must end with rank 0's death, not at the
/// timeout: `SETUP-DEATH after <s>: <error>`.
pub fn setup_death() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let size = LIMIT + 1;
    match comm.rank() {
        0 => {
            let mut got = vec![0u8; size];
            comm.recv(&mut got, 2).map_err(e2s)?;
            std::process::exit(3);
        }
        1 => {
            // Long enough for rank 2 to be waiting; never posts its send.
            std::thread::sleep(std::time::Duration::from_secs(3));
            Ok("idle".into())
        }
        _ => {
            let t = std::time::Instant::now();
            let m1 = vec![1u8; size];
            let mut got = vec![0u8; size];
            let mut g = comm.group_start();
            g.send(&m1, 0).map_err(e2s)?;
            g.recv(&mut got, 1).map_err(e2s)?;
            match g.group_end() {
                Ok(()) => Err("the group completed without rank 1's message".into()),
                Err(e) => Ok(format!(
                    "SETUP-DEATH after {:.2}: {e}",
                    t.elapsed().as_secs_f64()
                )),
            }
        }
    }
}

/// `host-p2p-setup-timeout` (3 ranks): rank 0's group receives from ranks 1
/// and 2 on new connections; rank 1 sends after a second, rank 2 never does.
/// Rank 0's timeout names rank 2 and the whole `FERROCX_TIMEOUT`:
/// `SETUP-TIMEOUT <error>`.
pub fn setup_timeout() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let size = LIMIT + 1;
    match comm.rank() {
        0 => {
            let (mut a, mut b) = (vec![0u8; size], vec![0u8; size]);
            let mut g = comm.group_start();
            g.recv(&mut a, 1).map_err(e2s)?;
            g.recv(&mut b, 2).map_err(e2s)?;
            match g.group_end() {
                Ok(()) => Err("the group completed without rank 2's message".into()),
                Err(e) => Ok(format!("SETUP-TIMEOUT {e}")),
            }
        }
        1 => {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // Rank 0's failure may reach this send first: either way is fine.
            let _ = comm.send(&vec![1u8; size], 0);
            Ok("sent".into())
        }
        _ => {
            std::thread::sleep(std::time::Duration::from_secs(5));
            Ok("idle".into())
        }
    }
}

/// `host-sendrecv ROUNDS`: `Communicator::sendrecv` around the ring at every
/// shift (0: with this rank itself, where the call falls back to a group),
/// sizes on both sides of shm-coll's limit, every byte checked, and the one
/// bad receive in the middle: rank 1 posts half the bytes rank 0 sends it at
/// shift 1, fails alone with the size error, and the next call still pairs.
/// Then a peer out of range is refused naming it, before anything moves.
pub fn sendrecv(rounds: u64) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let mut calls = 0;
    for round in 0..rounds {
        for k in 0..n {
            let (dest, src) = ((me + k) % n, (me + n - k) % n);
            // The bad receive: once, from rank 0 to rank 1, of a size both
            // ends give to shm-coll (a short receive the other runner takes
            // never meets its send: a hang, reported as such).
            let bad = round == 1 && k == 1;
            let len = if bad {
                100
            } else {
                SIZES[(hash(&[round, 5, k as u64]) % SIZES.len() as u64) as usize]
            };
            let out: Vec<u8> = (0..len).map(|i| byte(round, me, i)).collect();
            let short = bad && me == 1;
            let mut inp = vec![0u8; if short { len / 2 } else { len }];
            let r = comm.sendrecv(&out, dest, &mut inp, src);
            if short {
                let want = format!(
                    "mismatched sizes: rank 0 sent {len} bytes but rank 1 posted a receive of {} bytes",
                    len / 2
                );
                match r {
                    Err(Error::InvalidArgument(m)) if m == want => continue,
                    r => return Err(format!("round {round}: expected `{want}`, got {r:?}")),
                }
            }
            r.map_err(|e| format!("round {round}, shift {k} ({len} bytes): {e}"))?;
            if let Some(i) = (0..len).find(|&i| inp[i] != byte(round, src, i)) {
                return Err(format!(
                    "round {round}, shift {k}: byte {i} of {len} from rank {src} is {}",
                    inp[i]
                ));
            }
            calls += 1;
        }
    }
    let far = n + 2;
    match comm.sendrecv(&[1u8; 8], far, &mut [0u8; 8], 0) {
        Err(Error::InvalidArgument(m))
            if m.starts_with(&format!("send: peer rank {far} out of range")) => {}
        r => return Err(format!("a destination out of range: {r:?}")),
    }
    match comm.sendrecv(&[1u8; 8], 0, &mut [0u8; 8], far) {
        Err(Error::InvalidArgument(m))
            if m.starts_with(&format!("recv: peer rank {far} out of range")) => {}
        r => return Err(format!("a source out of range: {r:?}")),
    }
    let small = comm.host_p2p_runner(true, 8, (me + 1) % n).map_err(e2s)?;
    comm.barrier().map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok(format!("SENDRECV {calls} calls checked ({small})"))
}
