//! `coll-mix SEED ITERS`: groups mixing collectives with sends and receives
//! posted in different orders on different ranks; `coll-many N`: N small
//! all-reduces. Both end with leak checks.

use super::device::{sync, DevMem};
use super::{check_idle, e2s, hash, Case, Prepared};
use ferrocx::{CollKind, Communicator, DataType, EngineStats, RedOp};
use ferrocx_sdk::cuda::Stream;
use std::time::Instant;

/// Configurations repeat with this period, so that after the first period
/// every later one has been seen (the scratch pool must not grow after it).
const PERIOD: u64 = 500;

/// The collectives of the mix: the common five twice as often as the rest.
const KINDS: [CollKind; 15] = [
    CollKind::AllReduce,
    CollKind::AllGather,
    CollKind::Broadcast,
    CollKind::AllToAll,
    CollKind::ReduceScatter,
    CollKind::AllReduce,
    CollKind::AllGather,
    CollKind::Broadcast,
    CollKind::AllToAll,
    CollKind::ReduceScatter,
    CollKind::Reduce,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::AllToAllV,
    CollKind::Barrier,
];
const TYPES: [DataType; 6] = [
    DataType::I32,
    DataType::F32,
    DataType::U8,
    DataType::F64,
    DataType::Bf16,
    DataType::I64,
];

/// One point-to-point message of an iteration.
struct Msg {
    src: usize,
    dst: usize,
    /// Index among the messages from `src` to `dst` (matched in posting order).
    k: usize,
    len: usize,
}

fn msg_bytes(seed: u64, m: &Msg) -> Vec<u8> {
    let h = hash(&[seed, m.src as u64, m.dst as u64, m.k as u64]);
    (0..m.len)
        .map(|i| (h >> ((i % 8) * 8)) as u8 ^ (i / 8) as u8)
        .collect()
}

/// What every rank does in one iteration.
struct Plan {
    cases: Vec<Case>,
    msgs: Vec<Msg>,
}

fn plan(seed: u64, it: usize, n: usize) -> Plan {
    let cfg = hash(&[seed, it as u64 % PERIOD]);
    let data = hash(&[seed, 0xDA7A, it as u64]);
    let ncoll = 1 + (cfg % 3) as usize;
    let cases = (0..ncoll)
        .map(|j| {
            let h = hash(&[cfg, j as u64]);
            let kind = KINDS[(h % KINDS.len() as u64) as usize];
            let dtype = TYPES[((h >> 8) % 6) as usize];
            let count = match (h >> 16) % 8 {
                0 => 0,
                1 => 1,
                7 => 300 + ((h >> 24) % 700) as usize,
                _ => ((h >> 24) % 40) as usize,
            };
            let mut c = Case::new(kind, dtype, count, hash(&[data, j as u64]));
            c.op = RedOp::ALL[((h >> 40) % 5) as usize];
            c.root = ((h >> 44) % n as u64) as usize;
            c.in_place = (h >> 48).is_multiple_of(3);
            c
        })
        .collect();
    let mut msgs = Vec::new();
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            let h = hash(&[cfg, 0x5EED, src as u64, dst as u64]);
            for k in 0..(h % 3) as usize {
                let hk = hash(&[h, k as u64]);
                let len = if hk.is_multiple_of(9) {
                    4096 + (hk >> 8) as usize % 60_000
                } else {
                    (hk >> 8) as usize % 64
                };
                msgs.push(Msg { src, dst, k, len });
            }
        }
    }
    Plan { cases, msgs }
}

/// One entry of a rank's group: a collective, a send or a receive (indices
/// into the iteration's cases, sends and receives).
#[derive(Clone, Copy)]
enum Post {
    Coll(usize),
    Send(usize),
    Recv(usize),
}

/// Post `posts` as one host group.
fn post_host(
    comm: &Communicator,
    posts: &[Post],
    preps: &mut [Prepared],
    sends: &[(usize, Vec<u8>)],
    recvs: &mut [Vec<u8>],
    from: &[usize],
    typed: bool,
) -> ferrocx::Result<()> {
    let mut ps: Vec<Option<&mut Prepared>> = preps.iter_mut().map(Some).collect();
    let mut rs: Vec<Option<&mut Vec<u8>>> = recvs.iter_mut().map(Some).collect();
    let mut g = comm.group_start();
    for &p in posts {
        match p {
            Post::Coll(i) => ps[i].take().expect("posted once").post(&mut g, typed),
            Post::Send(i) => g.send(&sends[i].1, sends[i].0),
            Post::Recv(i) => g.recv(rs[i].take().expect("posted once"), from[i]),
        }?;
    }
    g.group_end()
}

/// Post `posts` as one device group: collectives ordered on one stream, sends
/// and receives on another (group semantics across streams), then wait for
/// both and copy every result back to the host buffers.
fn post_device(
    comm: &Communicator,
    posts: &[Post],
    preps: &mut [Prepared],
    sends: &[(usize, Vec<u8>)],
    recvs: &mut [Vec<u8>],
    from: &[usize],
    streams: &[Stream; 2],
) -> Result<(), String> {
    let mirrors = preps
        .iter()
        .map(Prepared::mirrors)
        .collect::<Result<Vec<_>, _>>()?;
    let upload = |b: &[u8]| -> Result<DevMem, String> {
        let d = DevMem::new(b.len())?;
        d.upload(b)?;
        Ok(d)
    };
    let dsend = sends
        .iter()
        .map(|(_, b)| upload(b))
        .collect::<Result<Vec<_>, _>>()?;
    let drecv = recvs
        .iter()
        .map(|b| upload(b))
        .collect::<Result<Vec<_>, _>>()?;
    let mut g = comm.group_start();
    for &p in posts {
        // SAFETY: every buffer and both streams outlive the synchronization below.
        let r = unsafe {
            match p {
                Post::Coll(i) => preps[i].post_device(&mut g, &mirrors[i], &streams[0]),
                Post::Send(i) => {
                    g.send_on(dsend[i].ptr, dsend[i].len, sends[i].0, streams[1].raw())
                }
                Post::Recv(i) => g.recv_on(drecv[i].ptr, drecv[i].len, from[i], streams[1].raw()),
            }
        };
        r.map_err(e2s)?;
    }
    g.group_end().map_err(e2s)?;
    for s in streams {
        sync(s)?;
    }
    comm.device_error().map_err(e2s)?;
    for (p, m) in preps.iter_mut().zip(&mirrors) {
        p.download(m)?;
    }
    for (b, d) in recvs.iter_mut().zip(&drecv) {
        d.download(b)?;
    }
    Ok(())
}

/// Iterations of mixed groups; results checked every `check_every` iterations and in the last 100.
/// `only`: run just these iterations (to reproduce one). `device`: every buffer in
/// CUDA device memory, stream-ordered (collectives and point-to-point on two streams).
pub fn run(
    seed: u64,
    iters: usize,
    check_every: usize,
    only: Option<(usize, usize)>,
    device: bool,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let streams = if device {
        Some([
            Stream::new().map_err(|e| e.to_string())?,
            Stream::new().map_err(|e| e.to_string())?,
        ])
    } else {
        None
    };
    let start = Instant::now();
    let mut at_1000: Option<EngineStats> = None;
    let mut max_pool = EngineStats::default();
    let mut samples: Vec<(usize, usize)> = Vec::new();
    let (mut colls, mut p2p) = (0usize, 0usize);
    for it in 0..iters {
        if only.is_some_and(|(a, b)| it < a || it > b) {
            continue;
        }
        let pl = plan(seed, it, n);
        let data = hash(&[seed, 0xDA7A, it as u64]);
        let mut preps: Vec<Prepared> = pl.cases.iter().map(|c| Prepared::new(c, me, n)).collect();
        let sends: Vec<(usize, Vec<u8>)> = pl
            .msgs
            .iter()
            .filter(|m| m.src == me)
            .map(|m| (m.dst, msg_bytes(data, m)))
            .collect();
        let mine: Vec<&Msg> = pl.msgs.iter().filter(|m| m.dst == me).collect();
        let from: Vec<usize> = mine.iter().map(|m| m.src).collect();
        let mut recvs: Vec<Vec<u8>> = mine.iter().map(|m| vec![0xEE; m.len]).collect();
        let order = hash(&[data, me as u64]);
        let typed = order.is_multiple_of(2);
        colls += preps.len();
        p2p += sends.len() + recvs.len();
        {
            // Point-to-point operations in one queue per (peer, direction),
            // merged in a random order that keeps each queue's order.
            let mut queues: Vec<Vec<Post>> = Vec::new();
            for p in 0..n {
                let s: Vec<Post> = (0..sends.len())
                    .filter(|&i| sends[i].0 == p)
                    .map(Post::Send)
                    .collect();
                queues.push(s);
            }
            let mut by_src: Vec<Vec<Post>> = (0..n).map(|_| Vec::new()).collect();
            for (i, m) in mine.iter().enumerate() {
                by_src[m.src].push(Post::Recv(i));
            }
            queues.extend(by_src);
            for q in &mut queues {
                q.reverse();
            }
            let mut merged = Vec::new();
            let mut h = order;
            while queues.iter().any(|q| !q.is_empty()) {
                h = hash(&[h]);
                let live: Vec<usize> = (0..queues.len())
                    .filter(|&i| !queues[i].is_empty())
                    .collect();
                let q = live[(h % live.len() as u64) as usize];
                merged.push(queues[q].pop().expect("non-empty"));
            }
            // Where the point-to-point operations go: before, after or between
            // the collectives, by rank parity and iteration (slots never
            // decrease along `merged`, which keeps each queue's order).
            let ncoll = preps.len();
            let mut slot_of: Vec<usize> = (0..merged.len())
                .map(|i| match (me + it) % 3 {
                    0 => 0,
                    1 => ncoll,
                    _ => (hash(&[order, i as u64]) % (ncoll as u64 + 1)) as usize,
                })
                .collect();
            slot_of.sort_unstable();
            let mut slots: Vec<Vec<Post>> = (0..=ncoll).map(|_| Vec::new()).collect();
            for (p, s) in merged.into_iter().zip(slot_of) {
                slots[s].push(p);
            }
            let mut posts = Vec::new();
            for (s, ps) in slots.into_iter().enumerate() {
                posts.extend(ps);
                if s < ncoll {
                    posts.push(Post::Coll(s));
                }
            }
            if std::env::var_os("FXTEST_MIX_DEBUG").is_some() {
                let d: Vec<String> = posts
                    .iter()
                    .map(|&p| match p {
                        Post::Coll(i) => preps[i].case.kind.name().to_string(),
                        Post::Send(i) => format!("send({}B→{})", sends[i].1.len(), sends[i].0),
                        Post::Recv(i) => format!("recv({}B←{})", recvs[i].len(), from[i]),
                    })
                    .collect();
                eprintln!("iteration {it} rank {me}: {}", d.join(" "));
            }
            let r = match &streams {
                None => post_host(&comm, &posts, &mut preps, &sends, &mut recvs, &from, typed)
                    .map_err(e2s),
                Some(st) => post_device(&comm, &posts, &mut preps, &sends, &mut recvs, &from, st),
            };
            r.map_err(|e| {
                format!(
                    "iteration {it}: rank {me}: group of [{}] and {} sends, {} receives failed: {e}",
                    pl.cases.iter().map(|c| c.describe(n)).collect::<Vec<_>>().join(", "),
                    sends.len(),
                    mine.len()
                )
            })?;
        }
        if it % check_every == 0 || it + 100 >= iters {
            for p in &preps {
                p.verify().map_err(|m| format!("iteration {it}: {m}"))?;
            }
            for (m, b) in mine.iter().zip(&recvs) {
                if *b != msg_bytes(data, m) {
                    return Err(format!(
                        "iteration {it}: rank {me}: message {} of {} bytes from rank {} is wrong",
                        m.k, m.len, m.src
                    ));
                }
            }
        }
        if it + 1 == 1000.min(iters) || only.is_some_and(|(_, b)| it == b) {
            at_1000 = Some(check_idle(&comm, "after 1000 iterations")?);
        }
        let s = comm.stats();
        if (it + 1) % 1000 == 0 {
            samples.push((s.pooled_scratch, s.pooled_scratch_bytes));
        }
        max_pool.pooled_scratch = max_pool.pooled_scratch.max(s.pooled_scratch);
        max_pool.pooled_scratch_bytes = max_pool.pooled_scratch_bytes.max(s.pooled_scratch_bytes);
    }
    let elapsed = start.elapsed();
    let end = check_idle(&comm, &format!("after {iters} iterations"))?;
    let first = at_1000.unwrap_or(end);
    println!(
        "rank {me}: {iters} iterations ({colls} collectives, {p2p} sends/receives) in {:.1} s; stats after 1000: {first:?}, at the end: {end:?}, largest pool seen: {max_pool:?}; (buffers, bytes) every 1000: {samples:?}",
        elapsed.as_secs_f64()
    );
    // The pool's size depends on how many plans overlapped at some moment,
    // so it may creep by a buffer or two; growth with the iteration count
    // (9000 iterations after the first sample) would go far past this bound.
    let bound = |x: usize, floor: usize| 2 * x.max(floor);
    if end.pooled_scratch > bound(first.pooled_scratch, 4)
        || end.pooled_scratch_bytes > bound(first.pooled_scratch_bytes, 64 << 10)
    {
        return Err(format!(
            "rank {me}: the scratch pool grew with the iterations (which repeat every {PERIOD}): after 1000: {first:?}; at the end: {end:?}; samples: {samples:?}"
        ));
    }
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {iters} mixed iterations verified{}, nothing leaked",
        if device { " on device memory" } else { "" }
    ))
}

/// `iters` all-reduces of one u64 (8 bytes), each checked; then leak checks.
pub fn many(iters: usize) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank() as u64, comm.nranks() as u64);
    let start = Instant::now();
    let mut out = [0u64; 1];
    for it in 0..iters as u64 {
        let v = [it.wrapping_mul(0x1_0000_0001) ^ (me << 40)];
        comm.all_reduce(&v, &mut out, RedOp::Sum)
            .map_err(|e| format!("rank {me}: all_reduce {it}: {e}"))?;
        let want = (0..n).fold(0u64, |a, r| {
            a.wrapping_add(it.wrapping_mul(0x1_0000_0001) ^ (r << 40))
        });
        if out[0] != want {
            return Err(format!(
                "rank {me}: all_reduce {it}: got {:#x} expected {want:#x}",
                out[0]
            ));
        }
    }
    let elapsed = start.elapsed();
    let s = check_idle(&comm, &format!("after {iters} all-reduces"))?;
    println!(
        "rank {me}: {iters} 8-byte all-reduces in {:.2} s ({:.1} us each); stats {s:?}",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / iters.max(1) as f64
    );
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {iters} all-reduces verified, nothing leaked"
    ))
}

/// Parse `KIND[:DTYPE[:COUNT]][:op=OP][:root=R][:algo=A][:ip]` (e.g.
/// `alltoallv:double:1`, `reduce:int64:32:root=1:ip`).
fn parse_case(s: &str, seed: u64) -> Result<Case, String> {
    let mut it = s.split(':');
    let name = it.next().unwrap_or_default();
    let kind = CollKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| format!("unknown collective {name}"))?;
    let mut c = Case::new(kind, DataType::I32, 0, seed);
    for (i, f) in it.enumerate() {
        if let Some(v) = f.strip_prefix("op=") {
            c.op = RedOp::parse(v).map_err(|e| e.to_string())?;
        } else if let Some(v) = f.strip_prefix("root=") {
            c.root = v.parse().map_err(|_| format!("bad root {v}"))?;
        } else if let Some(v) = f.strip_prefix("algo=") {
            c.algo = Some(ferrocx::Algo::parse(v).ok_or_else(|| format!("bad algo {v}"))?);
        } else if f == "ip" {
            c.in_place = true;
        } else if i == 0 {
            c.dtype = DataType::parse(f).map_err(|e| e.to_string())?;
        } else {
            c.count = f.parse().map_err(|_| format!("bad count {f}"))?;
        }
    }
    Ok(c)
}

/// `coll-group REPEAT ENTRY…`: the given operations in one group, in the
/// given order, `REPEAT` times, each result checked (a reproducer for one
/// group of the mix). An entry is a collective (see `parse_case`),
/// `send:PEER:BYTES` or `recv:PEER:BYTES`; `rK/ENTRY` applies to rank K only
/// (every rank must end up with the same collectives in the same order).
pub fn group(repeat: usize, specs: &[String]) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let mine: Vec<&str> = specs
        .iter()
        .filter_map(
            |s| match s.strip_prefix('r').and_then(|x| x.split_once('/')) {
                Some((k, e)) => (k.parse() == Ok(me)).then_some(e),
                None => Some(s.as_str()),
            },
        )
        .collect();
    let pattern = |src: usize, dst: usize, k: usize, len: usize, rep: usize| -> Vec<u8> {
        let h = hash(&[src as u64, dst as u64, k as u64, rep as u64]);
        (0..len)
            .map(|i| (h >> ((i % 8) * 8)) as u8 ^ (i / 8) as u8)
            .collect()
    };
    for rep in 0..repeat {
        let mut preps: Vec<Prepared> = Vec::new();
        let mut sends: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut recvs: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut order: Vec<(u8, usize)> = Vec::new();
        let (mut ks, mut kr) = (vec![0usize; n], vec![0usize; n]);
        for e in &mine {
            let f: Vec<&str> = e.split(':').collect();
            let peer_len = || -> Result<(usize, usize), String> {
                let p = f
                    .get(1)
                    .and_then(|x| x.parse().ok())
                    .ok_or(format!("bad peer in {e}"))?;
                let l = f
                    .get(2)
                    .and_then(|x| x.parse().ok())
                    .ok_or(format!("bad length in {e}"))?;
                Ok((p, l))
            };
            match f[0] {
                "send" => {
                    let (p, l) = peer_len()?;
                    sends.push((p, pattern(me, p, ks[p], l, rep)));
                    ks[p] += 1;
                    order.push((1, sends.len() - 1));
                }
                "recv" => {
                    let (p, l) = peer_len()?;
                    recvs.push((p, vec![0xEE; l], pattern(p, me, kr[p], l, rep)));
                    kr[p] += 1;
                    order.push((2, recvs.len() - 1));
                }
                _ => {
                    let c = parse_case(e, hash(&[rep as u64, preps.len() as u64]))?;
                    preps.push(Prepared::new(&c, me, n));
                    order.push((0, preps.len() - 1));
                }
            }
        }
        {
            let mut ps: Vec<Option<&mut Prepared>> = preps.iter_mut().map(Some).collect();
            let mut rs: Vec<Option<(usize, &mut Vec<u8>)>> =
                recvs.iter_mut().map(|r| Some((r.0, &mut r.1))).collect();
            let mut g = comm.group_start();
            for &(what, i) in &order {
                match what {
                    0 => ps[i].take().expect("once").post(&mut g, false),
                    1 => g.send(&sends[i].1, sends[i].0),
                    _ => {
                        let (peer, b) = rs[i].take().expect("once");
                        g.recv(b, peer)
                    }
                }
                .map_err(e2s)?;
            }
            g.group_end()
                .map_err(|e| format!("repetition {rep}: rank {me}: {e}"))?;
        }
        for p in &preps {
            p.verify().map_err(|m| format!("repetition {rep}: {m}"))?;
        }
        for (p, got, want) in &recvs {
            if got != want {
                return Err(format!(
                    "repetition {rep}: rank {me}: a message of {} bytes from rank {p} is wrong",
                    got.len()
                ));
            }
        }
    }
    check_idle(&comm, "after the groups")?;
    comm.destroy().map_err(e2s)?;
    Ok(format!("rank {me}: {repeat} groups of {mine:?} verified"))
}

/// `Communicator::split`: color = rank % 2 (the last rank passes -1 and gets
/// none), key = -rank (reverse order); in each new communicator an all-reduce
/// of the old ranks and an all-gather check membership and order.
pub fn split() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(super::e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let color = if me == n - 1 { -1 } else { (me % 2) as i32 };
    let sub = comm.split(color, -(me as i32)).map_err(super::e2s)?;
    // The parent still works beside its children.
    let mine = [me as u64];
    let mut total = [0u64];
    comm.all_reduce(&mine, &mut total, ferrocx::RedOp::Sum)
        .map_err(super::e2s)?;
    if total[0] != (0..n as u64).sum::<u64>() {
        return Err(format!("rank {me}: parent all-reduce gave {}", total[0]));
    }
    let Some(sub) = sub else {
        comm.barrier_oob().map_err(super::e2s)?;
        comm.destroy().map_err(super::e2s)?;
        return Ok(format!("rank {me}: no color, no communicator"));
    };
    let members: Vec<usize> = (0..n - 1).filter(|r| r % 2 == me % 2).rev().collect();
    if sub.nranks() != members.len() || members[sub.rank()] != me {
        return Err(format!(
            "rank {me}: new rank {} of {}, expected {} of {}",
            sub.rank(),
            sub.nranks(),
            members.iter().position(|&r| r == me).unwrap_or(99),
            members.len()
        ));
    }
    let mut sum = [0u64];
    sub.all_reduce(&mine, &mut sum, ferrocx::RedOp::Sum)
        .map_err(super::e2s)?;
    let mut all = vec![0u64; members.len()];
    sub.all_gather(&mine, &mut all).map_err(super::e2s)?;
    let want: Vec<u64> = members.iter().map(|&r| r as u64).collect();
    if sum[0] != want.iter().sum::<u64>() || all != want {
        return Err(format!(
            "rank {me}: sum {} gathered {all:?}, expected {want:?}",
            sum[0]
        ));
    }
    sub.barrier_oob().map_err(super::e2s)?;
    sub.destroy().map_err(super::e2s)?;
    comm.barrier_oob().map_err(super::e2s)?;
    comm.destroy().map_err(super::e2s)?;
    Ok(format!(
        "rank {me}: rank {} of {} in color {color}",
        members.iter().position(|&r| r == me).unwrap_or(0),
        members.len()
    ))
}
