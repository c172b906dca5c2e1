//! `coll-repeat`: calls that repeat the one before but for one field — the
//! receive buffer, the length, in place, the operator, the type, the root. A
//! host call that repeats the last one a plugin ran exactly goes straight to
//! that plugin's launch (the core's `Repeat`); each variation here must still
//! land where it says, every result compared, and an invalid variation must
//! fail alone. `--expect NAME`: the plugin the status report must name after
//! the calls (the repeats ran there).

use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, Error, RedOp};

const LEN: usize = 64;
/// What a receive buffer holds before a call; a call must not leave it there.
const UNTOUCHED: i64 = -7_777;

/// Rank `r`'s element `i`: negative on rank 0, so a maximum taken as unsigned
/// differs from one taken as signed.
fn input(r: usize, i: usize) -> i64 {
    (r as i64 - 1) * 1_000 + i as i64
}

fn compare(what: &str, got: &[i64], want: impl Fn(usize) -> i64) -> Result<(), String> {
    match (0..got.len()).find(|&i| got[i] != want(i)) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {} where {} was expected",
            got[i],
            want(i)
        )),
    }
}

fn bytes(v: &[i64]) -> &[u8] {
    // SAFETY: i64 storage viewed as bytes, within its length.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn bytes_mut(v: &mut [i64]) -> &mut [u8] {
    // SAFETY: as above; every byte pattern is a valid i64.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

pub fn run(expect: Option<String>) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let send: Vec<i64> = (0..LEN).map(|i| input(me, i)).collect();
    let sum = |i: usize| (0..n).map(|r| input(r, i)).sum::<i64>();
    let (mut b, mut c) = (vec![UNTOUCHED; LEN], vec![UNTOUCHED; LEN]);
    let e = |what: &'static str| move |e: Error| format!("{what}: {e}");

    for round in 0..3 {
        b.fill(UNTOUCHED);
        comm.all_reduce(&send, &mut b, RedOp::Sum)
            .map_err(e("all_reduce"))?;
        compare(&format!("all_reduce, call {round}"), &b, sum)?;
    }
    // Another receive buffer: the result goes there, and the last one keeps
    // what it held.
    b.fill(UNTOUCHED);
    comm.all_reduce(&send, &mut c, RedOp::Sum)
        .map_err(e("all_reduce into another buffer"))?;
    compare("all_reduce into another buffer", &c, sum)?;
    compare("the previous receive buffer", &b, |_| UNTOUCHED)?;
    // The same buffers, one element shorter.
    comm.all_reduce(&send[..LEN - 1], &mut b[..LEN - 1], RedOp::Sum)
        .map_err(e("shorter all_reduce"))?;
    compare("shorter all_reduce", &b[..LEN - 1], sum)?;
    compare("the element past a shorter call", &b[LEN - 1..], |_| {
        UNTOUCHED
    })?;
    // Another operator, then the same bytes as another type.
    comm.all_reduce(&send, &mut b, RedOp::Max)
        .map_err(e("max"))?;
    compare("max", &b, |i| input(n - 1, i))?;
    let as_type = |dtype| CollSpec::new(CollKind::AllReduce, dtype, LEN).op(RedOp::Min);
    comm.collective(&as_type(DataType::I64), bytes(&send), bytes_mut(&mut b))
        .map_err(e("signed min"))?;
    compare("signed min", &b, |i| input(0, i))?;
    comm.collective(&as_type(DataType::U64), bytes(&send), bytes_mut(&mut b))
        .map_err(e("unsigned min"))?;
    // Rank 0's elements are negative, the largest as unsigned; rank 1's are the
    // smallest unsigned (with 2 ranks, the only others).
    compare("unsigned min", &b, |i| {
        (0..n).map(|r| input(r, i) as u64).min().expect("ranks") as i64
    })?;
    // In place, on the buffer that was the receive buffer.
    b.copy_from_slice(&send);
    comm.all_reduce_in_place(&mut b, RedOp::Sum)
        .map_err(e("in place"))?;
    compare("all_reduce in place", &b, sum)?;
    // Rooted: the root changes, then comes back.
    for root in [0, n - 1, 0] {
        b.fill(UNTOUCHED);
        comm.broadcast(&send, &mut b, root)
            .map_err(e("broadcast"))?;
        compare(&format!("broadcast from {root}"), &b, |i| input(root, i))?;
    }
    // An invalid root on the same buffers fails on this rank alone, and the
    // call before it still runs after it.
    match comm.broadcast(&send, &mut b, n) {
        Err(Error::InvalidArgument(m)) if m.contains("out of range") => {}
        other => return Err(format!("broadcast from root {n}: {other:?}")),
    }
    b.fill(UNTOUCHED);
    comm.broadcast(&send, &mut b, 0)
        .map_err(e("broadcast after an invalid one"))?;
    compare("broadcast after an invalid one", &b, |i| input(0, i))?;
    let report = comm.status_report().map_err(e2s)?;
    if let Some(name) = expect {
        if !report.contains(&format!("'{name}'")) {
            return Err(format!("the calls did not run on {name}: {report}"));
        }
    }
    Ok(format!("repeats at {n} ranks: {report}"))
}
