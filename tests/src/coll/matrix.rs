//! `coll-matrix`: every collective × data type × operator × count × root ×
//! placement, plus every algorithm forced, checked against the model.

use super::{check_idle, e2s, mix64, Case, Prepared};
use ferrocx::{Algo, CollKind, CollSpec, Communicator, DataType, RedOp};
use std::time::{Duration, Instant};

/// Above 256 KiB of f32: the large-message algorithms.
pub const LARGE: usize = 65_537 + 3;

fn roots(kind: CollKind, n: usize) -> Vec<usize> {
    if kind.rooted() && n > 1 {
        vec![0, n - 1]
    } else {
        vec![0]
    }
}

/// The matrix for `n` ranks, identical on every rank.
pub fn cases(n: usize) -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    let mut push = |kind, dtype, op, count, algo: Option<Algo>| {
        for root in roots(kind, n) {
            for in_place in [false, true] {
                let seed = mix64(v.len() as u64);
                v.push(Case {
                    kind,
                    dtype,
                    op,
                    count,
                    root,
                    in_place,
                    algo,
                    seed,
                });
            }
        }
    };
    let kinds = CollKind::ALL
        .into_iter()
        .filter(|&k| k != CollKind::Barrier);
    let ops = |k: CollKind, all: &[RedOp]| {
        if k.reduces() {
            all.to_vec()
        } else {
            vec![RedOp::Sum]
        }
    };
    // Every type and operator at small and medium counts.
    for kind in kinds.clone() {
        for dtype in DataType::ALL {
            for op in ops(kind, &RedOp::ALL) {
                for count in [0, 1, 7, 1000] {
                    push(kind, dtype, op, count, None);
                }
            }
        }
    }
    // Large messages: every type and operator as well (it runs fast enough).
    for kind in kinds.clone() {
        for dtype in DataType::ALL {
            for op in ops(kind, &RedOp::ALL) {
                push(kind, dtype, op, LARGE, None);
            }
        }
    }
    // All-to-all-v whose ranks move different amounts around the default
    // 1 MiB-per-channel threshold (about 2.4, 2.0 and 1.6 MiB at 3 ranks):
    // every rank must still split it the same way.
    push(
        CollKind::AllToAllV,
        DataType::F64,
        RedOp::Sum,
        150_000,
        None,
    );
    // Every algorithm forced, f32 sum.
    for kind in kinds {
        for algo in Algo::for_kind(kind) {
            for count in [7, 4099, LARGE] {
                push(kind, DataType::F32, RedOp::Sum, count, Some(algo));
            }
        }
    }
    v
}

/// Run the matrix (cases whose description contains `filter`, if given); with
/// `device`, on CUDA device memory through the stream-ordered API. With
/// `window` (device only) every buffer lies in one symmetric window over the
/// test arena, so collective plugins that need windows can run the calls
/// (keep the filter to calls whose buffers are the same size on every rank:
/// a window's buffers must lie at the same offset everywhere); `expect` names
/// the implementation every call with data must choose.
pub fn run(
    filter: Option<String>,
    device: bool,
    window: bool,
    expect: Option<String>,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let stream = if device {
        if comm.device().is_none() {
            return Err(format!(
                "rank {me}: --mem cuda but no GPU: {:?}",
                ferrocx_sdk::cuda::available()
            ));
        }
        Some(ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let win = match (window, &stream) {
        (true, Some(_)) => {
            let (base, bytes) = super::device::arena()?;
            // SAFETY: the arena stays allocated for the life of this thread.
            Some(unsafe { comm.window_register_device(base, bytes) }.map_err(e2s)?)
        }
        (true, None) => return Err("--window needs --mem cuda".into()),
        _ => None,
    };
    let all = cases(n);
    let start = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut bad = 0usize;
    let mut ran = 0usize;
    let mut per_kind: Vec<(CollKind, Duration, usize)> = Vec::new();
    for (i, case) in all.iter().enumerate() {
        let d = case.describe(n);
        // `--filter TEXT` keeps the cases whose description contains TEXT (or one
        // of `A|B|…`; `^A`: starts with A); `!TEXT` drops them; `X&Y` keeps what
        // both keep.
        let clause = |f: &str| match f.strip_prefix('!') {
            Some(not) => !d.contains(not),
            None => f.split('|').any(|x| match x.strip_prefix('^') {
                Some(head) => d.starts_with(head),
                None => d.contains(x),
            }),
        };
        let keep = filter.as_deref().is_none_or(|f| f.split('&').all(clause));
        if !keep {
            continue;
        }
        let mut p = Prepared::new(case, me, n);
        let t = Instant::now();
        match &stream {
            // A forced algorithm is the core's own.
            Some(s) if expect.is_some() && case.count > 0 && case.algo.is_none() => {
                let want = expect.as_deref().unwrap_or_default();
                p.run_device_expecting(&comm, s, want)
            }
            Some(s) => p.run_device(&comm, s),
            None => p.run(&comm).map_err(e2s),
        }
        .map_err(|e| format!("case {i}: rank {me}: {d}: the call failed: {e}"))?;
        let took = t.elapsed();
        match per_kind.iter_mut().find(|x| x.0 == case.kind) {
            Some(x) => {
                x.1 += took;
                x.2 += 1;
            }
            None => per_kind.push((case.kind, took, 1)),
        }
        ran += 1;
        if let Err(m) = p.verify() {
            bad += 1;
            if failures.len() < 40 {
                failures.push(format!("case {i}: {m}"));
            }
        }
    }
    let matrix_time = start.elapsed();
    // Barriers: every algorithm, both placements; a late rank holds the others.
    for algo in [None, Some(Algo::Dissemination)] {
        let mut spec = CollSpec::new(CollKind::Barrier, DataType::U8, 0);
        if let Some(a) = algo {
            spec = spec.algo(a);
        }
        for in_place in [false, true] {
            if me == 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let t = Instant::now();
            let r = if in_place {
                comm.collective_in_place(&spec, &mut [])
            } else {
                comm.collective(&spec, &[], &mut [])
            };
            r.map_err(|e| format!("rank {me}: barrier (algo {algo:?}, in place {in_place}): {e}"))?;
            if me != 0 && t.elapsed() < Duration::from_millis(200) {
                failures.push(format!(
                    "rank {me}: barrier (algo {algo:?}, in place {in_place}) returned after {:?} while rank 0 slept 300 ms before entering",
                    t.elapsed()
                ));
                bad += 1;
            }
        }
    }
    if let Some(w) = win {
        comm.window_deregister(w).map_err(e2s)?;
    }
    let stats = check_idle(&comm, "after the matrix")?;
    comm.destroy().map_err(e2s)?;
    for (k, d, c) in &per_kind {
        println!(
            "{:<15} {c:>5} calls {:>8.1} ms",
            k.name(),
            d.as_secs_f64() * 1e3
        );
    }
    println!(
        "rank {me}: {ran} cases in {:.1} s (wall, with checking); scratch pool {stats:?}",
        matrix_time.as_secs_f64()
    );
    if bad > 0 {
        for f in &failures {
            println!("MISMATCH {f}");
        }
        return Err(format!(
            "rank {me}: {bad} of {ran} cases wrong (first {} listed above)",
            failures.len()
        ));
    }
    let mem = if device { " on device memory" } else { "" };
    Ok(format!("rank {me}: {ran} collective cases verified{mem}"))
}
