//! `coll-bad WHAT`: bad collective input on 2 ranks; `coll-async`: requests.

use super::{check_idle, e2s, ABuf, Case, Prepared};
use ferrocx::{Algo, CollKind, CollSpec, Communicator, DataType, Error, RedOp, VCounts};
use std::time::{Duration, Instant};

/// `r` must be `InvalidArgument` whose message contains every needle.
fn invalid<T: std::fmt::Debug>(
    what: &str,
    r: ferrocx::Result<T>,
    needles: &[&str],
) -> Result<(), String> {
    match r {
        Err(Error::InvalidArgument(m)) if needles.iter().all(|n| m.contains(n)) => {
            println!("ok: {what}: {m}");
            Ok(())
        }
        Err(e @ Error::InvalidArgument(_)) => Err(format!(
            "{what}: the error does not mention {needles:?}: {e}"
        )),
        other => Err(format!("{what}: expected InvalidArgument, got {other:?}")),
    }
}

/// A checked all-reduce proving the communicator still works.
fn still_works(comm: &Communicator, when: &str) -> Result<(), String> {
    let n = comm.nranks();
    let me = comm.rank();
    let send: Vec<i64> = (0..257).map(|i| i * 3 + me as i64).collect();
    let mut recv = vec![0i64; 257];
    comm.all_reduce(&send, &mut recv, RedOp::Sum)
        .map_err(|e| format!("{when}: a valid all_reduce failed: {e}"))?;
    let sum_ranks = (0..n as i64).sum::<i64>();
    for (i, &v) in recv.iter().enumerate() {
        let want = i as i64 * 3 * n as i64 + sum_ranks;
        if v != want {
            return Err(format!(
                "{when}: all_reduce element {i}: got {v} expected {want}"
            ));
        }
    }
    Ok(())
}

/// Argument checks that involve no other rank.
fn local(comm: &Communicator) -> Result<(), String> {
    let me = comm.rank();
    let n = comm.nranks();
    // Count overflow: nranks*count*8 bytes do not fit the address space.
    invalid(
        "all_gather of usize::MAX/2 f64",
        comm.collective(
            &CollSpec::new(CollKind::AllGather, DataType::F64, usize::MAX / 2),
            &[],
            &mut [],
        ),
        &["overflow"],
    )?;
    invalid(
        "reduce_scatter of usize::MAX elements",
        comm.collective(
            &CollSpec::new(CollKind::ReduceScatter, DataType::U8, usize::MAX),
            &[],
            &mut [],
        ),
        &["overflow"],
    )?;
    // Buffers too small.
    let a = ABuf::new(4096, 0);
    let mut b = ABuf::new(4096, 0);
    let ar = CollSpec::new(CollKind::AllReduce, DataType::F32, 100);
    // The NCCL layer's way in: host buffers are left to the caller, on rank 0
    // only, and take no call number (the collectives after this still match).
    if me == 0 {
        let (s, r) = (a.bytes().as_ptr() as u64, b.bytes_mut().as_mut_ptr() as u64);
        for (send, recv, in_place) in [(s, r, false), (r, r, true), (0, r, false), (0, 0, false)] {
            // SAFETY: host memory: nothing is queued on the (null) stream.
            let ran = unsafe {
                comm.collective_on_if_device(&ar, send, recv, in_place, std::ptr::null_mut())
            };
            if !matches!(ran, Ok(false)) {
                return Err(format!(
                    "collective_on_if_device on host buffers ({send:#x}, {recv:#x}, in place {in_place}): {ran:?}, expected Ok(false)"
                ));
            }
        }
    }
    invalid(
        "all_reduce with a short send buffer",
        comm.collective(&ar, &a.bytes()[..396], b.bytes_mut()),
        &["send buffer"],
    )?;
    invalid(
        "all_reduce with a short receive buffer",
        comm.collective(&ar, &a.bytes()[..400], &mut b.bytes_mut()[..399]),
        &["receive buffer"],
    )?;
    let ag = CollSpec::new(CollKind::AllGather, DataType::I32, 10);
    invalid(
        "all_gather with a receive buffer of one rank's size",
        comm.collective(&ag, &a.bytes()[..40], &mut b.bytes_mut()[..40]),
        &["receive buffer"],
    )?;
    invalid(
        "in-place all_gather with a buffer of one rank's size",
        comm.collective_in_place(&ag, &mut b.bytes_mut()[..40]),
        &["buffer"],
    )?;
    // Misaligned.
    invalid(
        "all_reduce of f32 at an odd address",
        comm.collective(&ar, &a.bytes()[1..401], b.bytes_mut()),
        &["aligned"],
    )?;
    invalid(
        "all_reduce of f32 into an odd address",
        comm.collective(&ar, &a.bytes()[..400], &mut b.bytes_mut()[3..403]),
        &["aligned"],
    )?;
    // Root out of range.
    for kind in [
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::Gather,
        CollKind::Scatter,
    ] {
        invalid(
            &format!("{} with root {n}", kind.name()),
            comm.collective(
                &CollSpec::new(kind, DataType::U8, 8).root(n),
                a.bytes(),
                b.bytes_mut(),
            ),
            &["root"],
        )?;
    }
    // Algorithms that do not apply.
    for (kind, algo) in [
        (CollKind::Broadcast, Algo::Ring),
        (CollKind::AllReduce, Algo::Pairwise),
        (CollKind::Barrier, Algo::Ring),
        (CollKind::AllToAll, Algo::Tree),
    ] {
        invalid(
            &format!("{} with algorithm {}", kind.name(), algo.name()),
            comm.collective(
                &CollSpec::new(kind, DataType::U8, 8).algo(algo),
                a.bytes(),
                b.bytes_mut(),
            ),
            &[algo.name()],
        )?;
    }
    // Overlap outside NCCL's in-place layouts (raw pointers: no aliasing references).
    let base = b.bytes_mut().as_mut_ptr();
    invalid(
        "all_reduce with overlapping buffers",
        // SAFETY: the send range aliases the receive range on purpose; the
        // call must reject it before touching either (both lie inside `b`).
        unsafe { comm.start_raw(&ar, (base.add(8) as *const u8, 400), (base, 400), false) }
            .map(drop),
        &["overlap"],
    )?;
    // All-to-all-v counts of the wrong length.
    let v = VCounts {
        send_counts: vec![1; n + 1],
        send_displs: vec![0; n + 1],
        recv_counts: vec![1; n],
        recv_displs: vec![0; n],
    };
    invalid(
        "alltoallv with n+1 send counts",
        comm.all_to_allv(&[0u32; 64], &mut [0u32; 64], &v),
        &["alltoallv"],
    )?;
    invalid(
        "alltoallv spec without counts",
        comm.collective(
            &CollSpec::new(CollKind::AllToAllV, DataType::U8, 8),
            a.bytes(),
            b.bytes_mut(),
        ),
        &["alltoallv"],
    )?;
    // Unknown names.
    invalid(
        "DataType::parse(float8)",
        DataType::parse("float8").map_err(ferrocx::Error::from),
        &["float8"],
    )?;
    invalid(
        "RedOp::parse(xor)",
        RedOp::parse("xor").map_err(ferrocx::Error::from),
        &["xor"],
    )?;
    // Typed API: wrong lengths.
    invalid(
        "typed all_gather with a short receive",
        comm.all_gather(&[1u64; 4], &mut [0u64; 4]),
        &["receive buffer"],
    )?;
    if a.bytes()[..400].iter().any(|&x| x != 0) {
        return Err("a rejected call modified a buffer".into());
    }
    println!("rank {me}: local checks passed");
    Ok(())
}

/// Ranks disagree; every rank must fail (or, where noted, may succeed) within bounds.
fn disagree(comm: &Communicator, what: &str) -> Result<String, String> {
    let me = comm.rank();
    let limit = comm.timeout() * 3 + Duration::from_secs(5);
    let t = Instant::now();
    let mut may_succeed = false;
    let r = match what {
        "count" => {
            // rank 0: 1000 elements, rank 1: 999.
            let c = 1000 - me;
            let send = vec![1.0f32; c];
            let mut recv = vec![0.0f32; c];
            comm.all_reduce(&send, &mut recv, RedOp::Sum)
        }
        "count-large" => {
            let c = (1 << 20) - me;
            let send = vec![1.0f32; c];
            let mut recv = vec![0.0f32; c];
            comm.all_reduce(&send, &mut recv, RedOp::Sum)
        }
        "root" | "root-large" => {
            // Both ranks think they are the root: small messages may be
            // delivered eagerly to nobody, so success is allowed there.
            may_succeed = what == "root";
            let c = if what == "root" { 64 } else { 1 << 20 };
            let mut buf = vec![me as u32 + 1; c];
            comm.broadcast_in_place(&mut buf, me)
        }
        other => return Err(format!("unknown disagreement {other}")),
    };
    let took = t.elapsed();
    println!(
        "rank {me}: mismatched {what}: {:?} after {:.2} s",
        r.as_ref().map_err(|e| e.to_string()),
        took.as_secs_f64()
    );
    if took > limit {
        return Err(format!(
            "mismatched {what}: took {took:?}, more than {limit:?} (timeout {:?})",
            comm.timeout()
        ));
    }
    match &r {
        Ok(()) if may_succeed => println!("rank {me}: mismatched {what}: not detected (allowed)"),
        Ok(()) => return Err(format!("mismatched {what}: rank {me} succeeded")),
        Err(Error::Unsupported(m)) => return Err(format!("mismatched {what}: unsupported: {m}")),
        Err(e) => println!("rank {me}: mismatched {what}: error as expected: {e}"),
    }
    // The process survives; destroy returns (an error is allowed); later calls say Destroyed.
    let t = Instant::now();
    let d = comm.destroy();
    println!(
        "rank {me}: destroy after the failure: {:?} in {:.2} s",
        d.as_ref().map_err(|e| e.to_string()),
        t.elapsed().as_secs_f64()
    );
    if t.elapsed() > limit {
        return Err(format!("destroy took {:?}", t.elapsed()));
    }
    after_destroy(comm)?;
    Ok(format!("rank {me}: mismatched {what} handled: {r:?}"))
}

fn after_destroy(comm: &Communicator) -> Result<(), String> {
    let mut buf = [0u8; 64];
    match comm.collective(
        &CollSpec::new(CollKind::AllReduce, DataType::U8, 8),
        &[1u8; 8],
        &mut buf,
    ) {
        Err(Error::Destroyed(_)) => {}
        other => return Err(format!("collective after destroy: {other:?}")),
    }
    match comm.all_reduce_in_place(&mut [1.0f64; 4], RedOp::Max) {
        Err(Error::Destroyed(_)) => {}
        other => return Err(format!("all_reduce_in_place after destroy: {other:?}")),
    }
    let g = comm.group_start();
    match g.group_end() {
        Err(Error::Destroyed(_)) | Ok(()) => {}
        other => return Err(format!("empty group after destroy: {other:?}")),
    }
    let mut g = comm.group_start();
    match g.collective(
        &CollSpec::new(CollKind::Barrier, DataType::U8, 0),
        &[],
        &mut [],
    ) {
        Err(Error::Destroyed(_)) => {}
        other => return Err(format!("group collective after destroy: {other:?}")),
    }
    drop(g);
    match comm.destroy() {
        Err(Error::Destroyed(_)) => Ok(()),
        other => Err(format!("second destroy: {other:?}")),
    }
}

/// `coll-bad local|count|count-large|root|root-large`.
pub fn run(what: &str) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    if what != "local" {
        // Connect and warm up first, so the failure is in the data path.
        still_works(&comm, "before")?;
        return disagree(&comm, what);
    }
    local(&comm)?;
    still_works(&comm, "after rejected calls")?;
    check_idle(&comm, "after rejected calls")?;
    comm.destroy().map_err(e2s)?;
    after_destroy(&comm)?;
    Ok(format!("rank {me}: bad collective input rejected"))
}

/// Requests: two in flight waited in either order, `test()` polling, a
/// launched group, and a dropped request.
pub fn asynchronous() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let case = |kind, dtype, count, seed| Case::new(kind, dtype, count, seed);
    for round in 0..20u64 {
        // Two collectives in flight, waited in an order that depends on the rank.
        let mut a = Prepared::new(
            &Case {
                op: RedOp::Max,
                ..case(
                    CollKind::AllReduce,
                    DataType::F32,
                    1000 + round as usize,
                    round,
                )
            },
            me,
            n,
        );
        let mut b = Prepared::new(
            &Case {
                in_place: round % 2 == 1,
                ..case(CollKind::AllGather, DataType::I32, 77, round + 100)
            },
            me,
            n,
        );
        // SAFETY: `a` and `b` are not touched until their requests complete.
        let ra = unsafe { a.start(&comm) }.map_err(|e| format!("start a: {e}"))?;
        // SAFETY: as above.
        let rb = unsafe { b.start(&comm) }.map_err(|e| format!("start b: {e}"))?;
        if (me + round as usize).is_multiple_of(2) {
            rb.wait().map_err(|e| format!("wait b: {e}"))?;
            ra.wait().map_err(|e| format!("wait a: {e}"))?;
        } else {
            ra.wait().map_err(|e| format!("wait a: {e}"))?;
            rb.wait().map_err(|e| format!("wait b: {e}"))?;
        }
        a.verify()?;
        b.verify()?;

        // test() until true, bounded.
        let mut c = Prepared::new(
            &Case {
                root: n - 1,
                ..case(CollKind::Broadcast, DataType::U8, 300_000, round + 200)
            },
            me,
            n,
        );
        // SAFETY: `c` is not touched until the request completes.
        let rc = unsafe { c.start(&comm) }.map_err(|e| format!("start c: {e}"))?;
        let t = Instant::now();
        let mut polls = 0u64;
        loop {
            polls += 1;
            if rc.test().map_err(|e| format!("test c: {e}"))? {
                break;
            }
            if t.elapsed() > comm.timeout() + Duration::from_secs(5) {
                return Err(format!("test() still false after {:?}", t.elapsed()));
            }
            std::thread::yield_now();
        }
        // Once complete, test() stays true and wait() returns at once.
        if !rc.test().map_err(|e| format!("test c again: {e}"))? {
            return Err("test() went back to false".into());
        }
        rc.wait().map_err(|e| format!("wait c after test: {e}"))?;
        c.verify()?;
        if round == 0 {
            println!("rank {me}: broadcast done after {polls} polls");
        }

        // A launched group: a reduce-scatter, an all-to-all and a ring of sends.
        let mut d = Prepared::new(
            &case(CollKind::ReduceScatter, DataType::I64, 33, round + 300),
            me,
            n,
        );
        let mut e = Prepared::new(
            &case(CollKind::AllToAll, DataType::F64, 5, round + 400),
            me,
            n,
        );
        let (right, left) = ((me + 1) % n, (me + n - 1) % n);
        let out = vec![(me as u8) ^ round as u8; 1000];
        let mut inp = vec![0u8; 1000];
        {
            let mut g = comm.group_start();
            g.send(&out, right).map_err(e2s)?;
            d.post(&mut g, false).map_err(e2s)?;
            g.recv(&mut inp, left).map_err(e2s)?;
            e.post(&mut g, false).map_err(e2s)?;
            // SAFETY: every buffer outlives the request, which is waited below.
            let r = unsafe { g.launch() }.map_err(|e| format!("launch: {e}"))?;
            r.wait().map_err(|e| format!("wait for the group: {e}"))?;
        }
        d.verify()?;
        e.verify()?;
        if inp.iter().any(|&x| x != (left as u8) ^ round as u8) {
            return Err(format!(
                "round {round}: ring message in the launched group is wrong"
            ));
        }

        // Dropping a request waits for it.
        let mut f = Prepared::new(
            &Case {
                op: RedOp::Prod,
                ..case(CollKind::AllReduce, DataType::I32, 4096, round + 500)
            },
            me,
            n,
        );
        // SAFETY: `f` is not touched until the request completes (drop waits).
        let rf = unsafe { f.start(&comm) }.map_err(|e| format!("start f: {e}"))?;
        drop(rf);
        f.verify()?;
    }
    check_idle(&comm, "after the requests")?;
    comm.destroy().map_err(e2s)?;
    Ok(format!("rank {me}: requests verified"))
}
