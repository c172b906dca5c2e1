//! Collectives through collective plugins on symmetric windows: the five
//! copy collectives × every type × in/out of place × roots, on host memory
//! (the C example plugin `cma`) or device memory (`ce`), every result checked
//! against the model of NCCL's layouts; which implementation ran is asked of
//! the communicator and compared with what the test expects.

use super::device::{
    begin_capture, hold, instantiate, release, replay_back_to_back, sync, CaptureMode, DevMem,
};
use super::{e2s, hash};
use ferrocx::{CollKind, CollSpec, Communicator, DataType};
use ferrocx_sdk::cuda::Stream;

const KINDS: [CollKind; 5] = [
    CollKind::AllGather,
    CollKind::Broadcast,
    CollKind::AllToAll,
    CollKind::Gather,
    CollKind::Scatter,
];

/// Byte `i` of block `blk` of rank `r`'s input for case `case`.
fn input(case: u64, r: usize, blk: usize, i: usize) -> u8 {
    hash(&[case, r as u64, blk as u64, i as u64]) as u8
}

/// Memory of one window: host bytes or a device allocation with a host mirror.
enum Mem {
    Host(Vec<u64>),
    Dev(DevMem, Vec<u8>),
}

impl Mem {
    fn new(bytes: usize, device: bool) -> Result<Mem, String> {
        Ok(if device {
            Mem::Dev(DevMem::new(bytes)?, vec![0; bytes])
        } else {
            Mem::Host(vec![0; bytes.div_ceil(8)])
        })
    }
    fn ptr(&mut self) -> u64 {
        match self {
            Mem::Host(v) => v.as_mut_ptr() as u64,
            Mem::Dev(d, _) => d.ptr,
        }
    }
    fn bytes(&mut self, len: usize) -> &mut [u8] {
        match self {
            // SAFETY: u64 storage viewed as bytes, within its length.
            Mem::Host(v) => unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), len) },
            Mem::Dev(_, m) => &mut m[..len],
        }
    }
    fn upload(&mut self, len: usize) -> Result<(), String> {
        match self {
            Mem::Host(_) => Ok(()),
            Mem::Dev(d, m) => d.upload(&m[..len]),
        }
    }
    fn download(&mut self, len: usize) -> Result<(), String> {
        match self {
            Mem::Host(_) => Ok(()),
            Mem::Dev(d, m) => d.download(&mut m[..len]),
        }
    }
}

/// One case of the matrix, as one rank sees it.
struct Case {
    kind: CollKind,
    id: u64,
    me: usize,
    n: usize,
    root: usize,
    block: usize,
    in_place: bool,
}

impl Case {
    /// The expected receive buffer (its first `n*block` bytes), from what it held before.
    fn expected(&self, before: &[u8]) -> Vec<u8> {
        let Case {
            kind,
            id,
            me,
            n,
            root,
            block,
            in_place,
        } = *self;
        let mut out = before.to_vec();
        let mut put = |at: usize, r: usize, blk: usize| {
            for i in 0..block {
                out[at + i] = input(id, r, blk, i);
            }
        };
        match kind {
            CollKind::AllGather => (0..n).for_each(|r| put(r * block, r, 0)),
            CollKind::Broadcast => put(0, root, 0),
            CollKind::AllToAll => (0..n).for_each(|p| put(p * block, p, me)),
            CollKind::Gather if me == root => (0..n).for_each(|r| put(r * block, r, 0)),
            CollKind::Gather => {}
            CollKind::Scatter => put(
                if in_place && me == root {
                    me * block
                } else {
                    0
                },
                root,
                me,
            ),
            // u8 sum: wrapping, the same on every rank whatever the order.
            CollKind::AllReduce => (0..block).for_each(|i| {
                out[i] = (0..n).fold(0u8, |a, r| a.wrapping_add(input(id, r, 0, i)));
            }),
            _ => unreachable!(),
        }
        out
    }

    /// Fill `send`/`recv`: inputs where NCCL's layout puts them, junk elsewhere.
    fn fill(&self, send: &mut [u8], recv: &mut [u8]) {
        let Case {
            kind,
            id,
            me,
            n,
            root,
            block,
            in_place,
        } = *self;
        recv.fill(0x5A);
        send.fill(0xC3);
        let buf = if in_place { recv } else { send };
        let mut put =
            |at: usize, blk: usize| (0..block).for_each(|i| buf[at + i] = input(id, me, blk, i));
        match kind {
            CollKind::AllGather if in_place => put(me * block, 0),
            CollKind::Gather if in_place && me == root => put(me * block, 0),
            CollKind::AllGather | CollKind::Gather => put(0, 0),
            CollKind::Broadcast if me == root => put(0, 0),
            CollKind::AllToAll => (0..n).for_each(|p| put(p * block, p)),
            CollKind::Scatter if me == root => (0..n).for_each(|p| put(p * block, p)),
            CollKind::AllReduce => put(0, 0),
            _ => {}
        }
    }
}

/// Run the matrix. `expect`: the implementation that must run every case a
/// plugin can take ("core" for none). Returns a summary.
pub fn run(
    expect: Option<String>,
    device: bool,
    counts: &[usize],
    cycles: usize,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    println!("collective plugins: {:?}", comm.collective_plugins());
    let max_block = counts.iter().max().copied().unwrap_or(0) * 8;
    let win_bytes = (n * max_block).max(64);
    let stream = if device {
        Some(Stream::new().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let mut send = Mem::new(win_bytes, device)?;
    let mut recv = Mem::new(win_bytes, device)?;
    let reg = |m: &mut Mem| -> Result<ferrocx::window::Window, String> {
        match m {
            Mem::Host(v) => {
                // SAFETY: u64 storage viewed as bytes.
                let b = unsafe {
                    std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), win_bytes)
                };
                comm.window_register(b).map_err(e2s)
            }
            // SAFETY: the allocation outlives the window (deregistered below).
            Mem::Dev(d, _) => unsafe { comm.window_register_device(d.ptr, win_bytes) }.map_err(e2s),
        }
    };
    let (ws, wr) = (reg(&mut send)?, reg(&mut recv)?);
    let mut cases = 0;
    let mut on: std::collections::BTreeMap<String, usize> = Default::default();
    let types = [
        DataType::U8,
        DataType::I8,
        DataType::F16,
        DataType::Bf16,
        DataType::I32,
        DataType::U32,
        DataType::F32,
        DataType::I64,
        DataType::U64,
        DataType::F64,
    ];
    for kind in KINDS {
        for dtype in types {
            for &count in counts {
                for root in [0, n - 1] {
                    for in_place in [false, true] {
                        cases += 1;
                        let case = cases as u64;
                        let block = count * dtype.size();
                        let all = n * block;
                        let spec = CollSpec::new(kind, dtype, count).root(root);
                        let c = Case {
                            kind,
                            id: case,
                            me,
                            n,
                            root,
                            block,
                            in_place,
                        };
                        c.fill(send.bytes(win_bytes), recv.bytes(win_bytes));
                        let before = recv.bytes(all).to_vec();
                        send.upload(win_bytes)?;
                        recv.upload(win_bytes)?;
                        let (sp, rp) = (send.ptr(), recv.ptr());
                        let choice = comm
                            .collective_choice(
                                &spec,
                                if in_place { rp } else { sp },
                                rp,
                                in_place,
                                device,
                            )
                            .map_err(e2s)?;
                        *on.entry(choice.winner().to_string()).or_default() += 1;
                        if let Some(x) = &expect {
                            // ce runs alltoall staged through its scratch only (none
                            // with FERROCX_CE_SCRATCH_BYTES=0); the C example plugin does
                            // not run it in place.
                            let no_scratch =
                                std::env::var("FERROCX_CE_SCRATCH_BYTES").is_ok_and(|v| v == "0");
                            let plugin_case = count > 0
                                && !(kind == CollKind::AllToAll
                                    && ((device && no_scratch) || (in_place && !device)));
                            if plugin_case && choice.winner() != x {
                                return Err(format!("{} {dtype} count {count} root {root} in place {in_place}: ran on {} ({}), expected {x}", kind.name(), choice.winner(), choice.explain()));
                            }
                        }
                        let r = match (&stream, in_place) {
                            (None, false) => {
                                let (s, r) = (sp as *const u8, rp as *mut u8);
                                // SAFETY: both windows hold win_bytes; disjoint.
                                let (s, r) = unsafe {
                                    (
                                        std::slice::from_raw_parts(s, win_bytes),
                                        std::slice::from_raw_parts_mut(r, win_bytes),
                                    )
                                };
                                comm.collective(&spec, s, r)
                            }
                            (None, true) => {
                                // SAFETY: the receive window holds win_bytes.
                                let r = unsafe {
                                    std::slice::from_raw_parts_mut(rp as *mut u8, win_bytes)
                                };
                                comm.collective_in_place(&spec, r)
                            }
                            // SAFETY: device windows alive; the stream is synchronized below.
                            (Some(s), false) => unsafe { comm.collective_on(&spec, sp, rp, s) },
                            // SAFETY: as above.
                            (Some(s), true) => unsafe { comm.collective_in_place_on(&spec, rp, s) },
                        };
                        r.map_err(|e| {
                            format!(
                                "{} {dtype} count {count} root {root} in place {in_place}: {e}",
                                kind.name()
                            )
                        })?;
                        if let Some(s) = &stream {
                            sync(s)?;
                            comm.device_error().map_err(e2s)?;
                        }
                        recv.download(all)?;
                        let want = c.expected(&before);
                        let got = recv.bytes(all);
                        if let Some(i) = (0..all).find(|&i| got[i] != want[i]) {
                            return Err(format!(
                                "{} {dtype} count {count} root {root} in place {in_place} on {}: rank {me} byte {i} is {:#04x}, expected {:#04x}",
                                kind.name(), choice.winner(), got[i], want[i]
                            ));
                        }
                    }
                }
            }
        }
    }
    comm.window_deregister(ws).map_err(e2s)?;
    comm.window_deregister(wr).map_err(e2s)?;
    // Register/deregister cycles leak nothing.
    let open0 = open_handles(device);
    for c in 0..cycles {
        let w = reg(&mut recv)?;
        comm.window_deregister(w)
            .map_err(|e| format!("cycle {c}: {e}"))?;
    }
    if comm.window_count() != 0 || open_handles(device) != open0 {
        return Err(format!(
            "after {cycles} window cycles: {} windows, {} IPC handles open (was {open0})",
            comm.window_count(),
            open_handles(device)
        ));
    }
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {cases} cases checked ({on:?}), {cycles} window cycles"
    ))
}

fn open_handles(device: bool) -> usize {
    use ferrocx_sdk::device::Driver;
    if device {
        ferrocx_sdk::device::cuda::CudaDriver.open_handles()
    } else {
        0
    }
}

/// Every rank registers a window, rank 1 of another size: an error on every rank naming it.
pub fn mismatched_window() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    let mut buf = vec![0u8; if me == 1 { 8192 } else { 4096 }];
    match comm.window_register(&mut buf) {
        Ok(_) => Err("a window of different sizes was accepted".into()),
        Err(e) if e.to_string().contains("rank 1") && e.to_string().contains("same size") => {
            if comm.window_count() != 0 {
                return Err("a failed registration left a window".into());
            }
            // The communicator still works.
            let mut ok = vec![0u8; 64];
            let w = comm.window_register(&mut ok).map_err(e2s)?;
            comm.window_deregister(w).map_err(e2s)?;
            comm.destroy().map_err(e2s)?;
            Ok(format!("rank {me}: {e}"))
        }
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

/// CUDA graph capture: 10 collectives (all_gather, alltoall, broadcast in
/// turn, each on its own region of the windows) captured once, the graph
/// replayed `replays` times with new inputs every time, every result checked.
/// `expect`: the implementation the captured calls must choose. `mismatch`:
/// the last rank captures call 3 (an all_reduce) with half the count: the
/// capture must fail on every rank with the mismatch, nothing replayed.
/// `stop_after`: the last rank replays that many times, then stays away
/// (alive, not calling) for `FERROCX_TIMEOUT` and 10 s: the others' next
/// replay must end (its captured waits give up) with the error naming it.
/// See [`GraphOpts`] for the rest.
pub fn graph(o: GraphOpts) -> Result<String, String> {
    use ferrocx_sdk::cuda::{check, sys, Event};
    const CALLS: usize = 10;
    // Eager calls around each replay (`mixed`): an all_reduce before, an
    // all_gather after, each on its own region past the graph's.
    const EAGER: [CollKind; 2] = [CollKind::AllReduce, CollKind::AllGather];
    let GraphOpts {
        replays,
        expect,
        mismatch,
        stop_after,
        block,
        mixed,
        fork,
        timed,
        capture,
        held,
        early_destroy,
    } = o;
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let side = Stream::new().map_err(|e| e.to_string())?;
    let eager = Stream::new().map_err(|e| e.to_string())?;
    let region = n * block;
    // The graph's regions, the eager calls', the held call's.
    let bytes = (CALLS + EAGER.len() + 1) * region;
    let (mut send, mut recv) = (Mem::new(bytes, true)?, Mem::new(bytes, true)?);
    let (sp, rp) = (send.ptr(), recv.ptr());
    // SAFETY: both allocations outlive the windows (deregistered below).
    let (ws, wr) = unsafe {
        (
            comm.window_register_device(sp, bytes).map_err(e2s)?,
            comm.window_register_device(rp, bytes).map_err(e2s)?,
        )
    };
    // all_reduce of 64 KiB runs one-shot by default (FERROCX_CE_ONESHOT_BYTES),
    // two-shot with a smaller limit.
    let kind_of = |i: usize| {
        [
            CollKind::AllGather,
            CollKind::AllToAll,
            CollKind::Broadcast,
            CollKind::AllReduce,
        ][i % 4]
    };
    let spec_of = |i: usize| CollSpec::new(kind_of(i), DataType::U8, block).root(i % n);
    let captured_spec = |i: usize| {
        let odd = mismatch && i == 3 && me == n - 1;
        CollSpec::new(
            kind_of(i),
            DataType::U8,
            if odd { block / 2 } else { block },
        )
        .root(i % n)
    };
    for i in 0..CALLS {
        let off = (i * region) as u64;
        let c = comm
            .collective_choice(&spec_of(i), sp + off, rp + off, false, true)
            .map_err(e2s)?;
        if let Some(x) = &expect {
            if c.winner() != x {
                return Err(format!(
                    "call {i} would run on {} ({}), expected {x}",
                    c.winner(),
                    c.explain()
                ));
            }
        }
    }
    let s = stream.raw();
    // `held`: an eager all_reduce queued before the capture behind a wait
    // that only ends after it, so ferrocx has work in flight (and its
    // threads something to watch) all through the capture.
    let held_case = Case {
        kind: CollKind::AllReduce,
        id: 1 << 41,
        me,
        n,
        root: 0,
        block,
        in_place: false,
    };
    let held_at = (CALLS + EAGER.len()) * region;
    let word = DevMem::new(4)?;
    let mut held_before = Vec::new();
    if held {
        let (sb, rb) = (
            &mut send.bytes(bytes)[held_at..held_at + region] as *mut [u8],
            &mut recv.bytes(bytes)[held_at..held_at + region] as *mut [u8],
        );
        // SAFETY: two distinct buffers' ranges, alive across the call.
        unsafe { held_case.fill(&mut *sb, &mut *rb) };
        held_before = recv.bytes(bytes)[held_at..held_at + region].to_vec();
        send.upload(bytes)?;
        recv.upload(bytes)?;
        word.upload(&[0; 4])?;
        hold(&eager, &word)?;
        let spec = CollSpec::new(CollKind::AllReduce, DataType::U8, block);
        let off = held_at as u64;
        // SAFETY: the windows are alive until the eager stream is synchronized below.
        unsafe { comm.collective_on(&spec, sp + off, rp + off, &eager) }
            .map_err(|e| format!("the held eager call: {e}"))?;
    }
    // `fork`: the odd calls go on `side`, forked from the capture's stream
    // at the start and joined at the end: the graph has no path between
    // them and the even ones but what ferrocx adds.
    let (forked, joined) = (
        Event::new().map_err(|e| e.to_string())?,
        Event::new().map_err(|e| e.to_string())?,
    );
    begin_capture(&stream, capture)?;
    if fork {
        check(
            // SAFETY: live events and streams of this context; `s` is
            // capturing, so `side` joins its capture.
            unsafe { sys::cuEventRecord(forked.raw(), s) },
            "cuEventRecord (fork)",
        )
        .and_then(|_| {
            check(
                // SAFETY: as above.
                unsafe { sys::cuStreamWaitEvent(side.raw(), forked.raw(), 0) },
                "cuStreamWaitEvent (fork)",
            )
        })
        .map_err(|e| e.to_string())?;
    }
    let mut captured = Ok(());
    for i in 0..CALLS {
        let off = (i * region) as u64;
        let on = if fork && i % 2 == 1 { &side } else { &stream };
        // SAFETY: the windows are alive until after the graph's last replay.
        captured = unsafe { comm.collective_on(&captured_spec(i), sp + off, rp + off, on) }
            .map_err(|e| format!("capturing call {i}: {e}"));
        if captured.is_err() {
            break;
        }
        if held && i == 0 {
            // A capture that lasts: ferrocx's watchdog wakes during it (it
            // polls the held call every 100 ms) whatever the machine's speed.
            std::thread::sleep(std::time::Duration::from_millis(350));
        }
    }
    if fork {
        let j = check(
            // SAFETY: as above (the join ends `side`'s part of the capture).
            unsafe { sys::cuEventRecord(joined.raw(), side.raw()) },
            "cuEventRecord (join)",
        )
        .and_then(|_| {
            check(
                // SAFETY: as above.
                unsafe { sys::cuStreamWaitEvent(s, joined.raw(), 0) },
                "cuStreamWaitEvent (join)",
            )
        });
        if captured.is_ok() {
            captured = j.map_err(|e| e.to_string());
        }
    }
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above; `g` is a valid out pointer.
    let end = check(
        unsafe { sys::cuStreamEndCapture(s, &mut g) },
        "cuStreamEndCapture",
    );
    if held {
        release(&side, &word)?;
        // The capture's own failure says more than the held call's.
        if let (Err(e), false) = (&captured, mismatch) {
            return Err(format!("{e} (with an eager call held across the capture)"));
        }
        sync(&eager).map_err(|e| format!("the held eager call: {e}"))?;
        recv.download(bytes)?;
        let want = held_case.expected(&held_before);
        let got = &recv.bytes(bytes)[held_at..held_at + region];
        if let Some(j) = (0..region).find(|&j| got[j] != want[j]) {
            return Err(format!(
                "the eager all_reduce held across the capture: rank {me} byte {j} is {:#04x}, expected {:#04x}",
                got[j], want[j]
            ));
        }
    }
    if mismatch {
        return match captured {
            Err(e) if e.contains("mismatched calls") => {
                // Later calls fail too: the communicator is broken.
                // SAFETY: as above (not capturing any more).
                let again = unsafe { comm.collective_on(&spec_of(0), sp, rp, &stream) };
                let _ = sync(&stream);
                let _ = comm.window_deregister(ws);
                let _ = comm.window_deregister(wr);
                match again {
                    Ok(()) => Err(format!("a call after the mismatch ({e}) was accepted")),
                    Err(_) => Ok(format!("MISMATCH {e}")),
                }
            }
            Err(e) => Err(format!("expected a mismatch, got: {e}")),
            Ok(()) => Err("capturing mismatched calls succeeded".into()),
        };
    }
    captured?;
    end.map_err(|e| e.to_string())?;
    if fork {
        kernels_in_line(g)?;
    }
    let exec = instantiate(g)?;
    let mut result = Ok(());
    // The last checked replay's calls and receive buffer before it.
    let mut last = None;
    let started = std::time::Instant::now();
    'replay: for rep in 0..replays {
        if stop_after == Some(rep) && me == n - 1 {
            let timeout = std::env::var("FERROCX_TIMEOUT")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(60);
            std::thread::sleep(std::time::Duration::from_secs(timeout + 10));
            result = Err("STOPPED".to_string());
            break;
        }
        let cases: Vec<Case> = (0..CALLS)
            .map(|i| Case {
                kind: kind_of(i),
                id: (rep * CALLS + i) as u64 + 1,
                me,
                n,
                root: i % n,
                block,
                in_place: false,
            })
            .chain(EAGER.iter().enumerate().map(|(j, &kind)| Case {
                kind,
                id: (1 << 40) + (rep * EAGER.len() + j) as u64,
                me,
                n,
                root: 0,
                block,
                in_place: false,
            }))
            .collect();
        for (i, c) in cases.iter().enumerate() {
            let (a, b) = (i * region, (i + 1) * region);
            let (sb, rb) = (
                &mut send.bytes(bytes)[a..b] as *mut [u8],
                &mut recv.bytes(bytes)[a..b] as *mut [u8],
            );
            // SAFETY: two distinct buffers' disjoint ranges, alive across the call.
            unsafe { c.fill(&mut *sb, &mut *rb) };
        }
        let before = recv.bytes(bytes).to_vec();
        send.upload(bytes)?;
        recv.upload(bytes)?;
        // `mixed`: eager call 0, the replay, eager call 1, nothing waiting
        // for anything in between (the eager stream is not the graph's).
        let eager_call = |j: usize| {
            let off = ((CALLS + j) * region) as u64;
            let spec = CollSpec::new(EAGER[j], DataType::U8, block);
            // SAFETY: the windows are alive until the eager stream is synchronized below.
            unsafe { comm.collective_on(&spec, sp + off, rp + off, &eager) }
                .map_err(|e| format!("replay {rep}, eager call {j}: {e}"))
        };
        if mixed {
            if let Err(e) = eager_call(0) {
                result = Err(e);
                break;
            }
        }
        // SAFETY: an instantiated graph; a live stream.
        if let Err(e) = check(unsafe { sys::cuGraphLaunch(exec, s) }, "cuGraphLaunch") {
            result = Err(format!("replay {rep}: {e}"));
            break;
        }
        if mixed {
            if let Err(e) = eager_call(1) {
                result = Err(e);
                break;
            }
        }
        if let Err(e) = sync(&stream).and_then(|_| sync(&eager)) {
            result = Err(format!("replay {rep}: {e}"));
            break;
        }
        if stop_after.is_some_and(|k| rep >= k) {
            // The replay ended without the last rank: its waits gave up,
            // which the watchdog reports within a second or so.
            let t = std::time::Instant::now();
            result = loop {
                if let Err(e) = comm.device_error() {
                    break Err(format!(
                        "ENDED after {:.1}s: {e}",
                        started.elapsed().as_secs_f64()
                    ));
                }
                if t.elapsed().as_secs() > 10 {
                    break Err(format!(
                        "replay {rep} ended without the last rank, and no error"
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            break;
        }
        recv.download(bytes)?;
        let checked = if mixed { cases.len() } else { CALLS };
        if let Some(e) = first_wrong(&cases[..checked], &before, recv.bytes(bytes), region) {
            result = Err(format!("replay {rep}, {e}"));
            break 'replay;
        }
        last = Some((cases, before));
    }
    // `timed`: replays back to back, nothing checked (the inputs are the
    // last replay's).
    let mut timing = String::new();
    if result.is_ok() && timed > 0 {
        let replays = replay_back_to_back(exec, &stream, timed);
        let us = replays
            .as_ref()
            .map_or(0.0, |t| t.as_secs_f64() * 1e6 / (timed * CALLS) as f64);
        result = replays.map(|_| ());
        timing = format!("; TIMED {block} B: {us:.2} us per call");
        // Eager all_reduces now that the communicator chains its launches
        // (each waits for and records the chain event): their cost.
        let spec = CollSpec::new(CollKind::AllReduce, DataType::U8, block);
        let off = (CALLS * region) as u64;
        let t = std::time::Instant::now();
        for _ in 0..timed * CALLS {
            // SAFETY: the windows are alive until the stream is synchronized below.
            if let Err(e) = unsafe { comm.collective_on(&spec, sp + off, rp + off, &eager) } {
                result = Err(format!("timed eager call: {e}"));
                break;
            }
        }
        result = result.and_then(|_| sync(&eager));
        let us = t.elapsed().as_secs_f64() * 1e6 / (timed * CALLS) as f64;
        timing += &format!("; EAGER all_reduce after the capture: {us:.2} us per call");
    }
    // `early_destroy`: replays, then the windows deregistered and the
    // communicator destroyed at once, nothing waited for: both must wait for
    // the replays (which the host never sees) before freeing what they use.
    if let (Ok(()), true, Some((cases, before))) = (&result, early_destroy > 0, last.take()) {
        recv.bytes(bytes).copy_from_slice(&before);
        recv.upload(bytes)?;
        for rep in 0..early_destroy {
            // SAFETY: an instantiated graph; a live stream.
            check(unsafe { sys::cuGraphLaunch(exec, s) }, "cuGraphLaunch")
                .map_err(|e| format!("replay {rep} before the destroy: {e}"))?;
        }
        comm.window_deregister(ws).map_err(e2s)?;
        comm.window_deregister(wr).map_err(e2s)?;
        comm.destroy().map_err(e2s)?;
        sync(&stream).map_err(|e| format!("the replays around the destroy: {e}"))?;
        recv.download(bytes)?;
        if let Some(e) = first_wrong(&cases[..CALLS], &before, recv.bytes(bytes), region) {
            return Err(format!(
                "the last of {early_destroy} replays around the destroy, {e}"
            ));
        }
        // SAFETY: destroyed once, after the last launch completed (synchronized above).
        unsafe {
            sys::cuGraphExecDestroy(exec);
            sys::cuGraphDestroy(g);
        }
        return Ok(format!(
            "rank {me}: {early_destroy} replays of {block} B, the windows deregistered and the communicator destroyed without waiting: every result whole"
        ));
    }
    // SAFETY: destroyed once, after the last launch completed (synchronized above).
    unsafe {
        sys::cuGraphExecDestroy(exec);
        sys::cuGraphDestroy(g);
    }
    if let Some(k) = stop_after {
        let _ = comm.window_deregister(ws);
        let _ = comm.window_deregister(wr);
        return match result {
            Err(e) if e == "STOPPED" => Ok(format!("rank {me}: stopped after {k} replays")),
            Err(e) if e.starts_with("ENDED") => Ok(e),
            Err(e) => Err(e),
            Ok(()) => Err("every replay completed without the last rank".into()),
        };
    }
    result?;
    comm.window_deregister(ws).map_err(e2s)?;
    comm.window_deregister(wr).map_err(e2s)?;
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: a graph of {CALLS} collectives of {block} B captured in {capture:?} mode{}{}{} replayed {replays} times, every result checked{timing}",
        if held { " beside a held eager call" } else { "" },
        if fork { ", half on a forked stream" } else { "" },
        if mixed { ", eager calls on another stream around each replay" } else { "" },
    ))
}

/// The first wrong byte of `cases` (call `i` at region `i` of `got`), said.
fn first_wrong(cases: &[Case], before: &[u8], got: &[u8], region: usize) -> Option<String> {
    cases.iter().enumerate().find_map(|(i, c)| {
        let (a, b) = (i * region, (i + 1) * region);
        let want = c.expected(&before[a..b]);
        (0..region).find(|&j| got[a + j] != want[j]).map(|j| {
            format!(
                "call {i} ({}): rank {} byte {j} is {:#04x}, expected {:#04x}",
                c.kind.name(),
                c.me,
                got[a + j],
                want[j]
            )
        })
    })
}

/// Every kernel node of `g` (ferrocx's: the test captures nothing else) on
/// one path: for each pair, one reaches the other. A graph whose branches
/// were captured on forked streams has no such path but what ce's launch
/// chain adds, and CUDA may run unordered branches at once.
fn kernels_in_line(g: ferrocx_sdk::cuda::sys::CUgraph) -> Result<(), String> {
    use ferrocx_sdk::cuda::{check, sys};
    let e = |e: ferrocx_sdk::PluginError| e.to_string();
    let mut n = 0usize;
    check(
        // SAFETY: a live graph; a null array asks for the count.
        unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut n) },
        "cuGraphGetNodes",
    )
    .map_err(e)?;
    let mut nodes = vec![std::ptr::null_mut(); n];
    check(
        // SAFETY: room for `n` nodes.
        unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut n) },
        "cuGraphGetNodes",
    )
    .map_err(e)?;
    let mut m = 0usize;
    check(
        // SAFETY: as above, for the edges.
        unsafe { sys::cuGraphGetEdges(g, std::ptr::null_mut(), std::ptr::null_mut(), &mut m) },
        "cuGraphGetEdges",
    )
    .map_err(e)?;
    let (mut from, mut to) = (vec![std::ptr::null_mut(); m], vec![std::ptr::null_mut(); m]);
    check(
        // SAFETY: room for `m` edges at each end.
        unsafe { sys::cuGraphGetEdges(g, from.as_mut_ptr(), to.as_mut_ptr(), &mut m) },
        "cuGraphGetEdges",
    )
    .map_err(e)?;
    let index = |x: sys::CUgraphNode| nodes.iter().position(|&y| y == x);
    let mut next = vec![Vec::new(); n];
    for (&a, &b) in from.iter().zip(&to).take(m) {
        if let (Some(a), Some(b)) = (index(a), index(b)) {
            next[a].push(b);
        }
    }
    // Nodes reachable from each (itself included).
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|start| {
            let mut seen = vec![false; n];
            let mut todo = vec![start];
            while let Some(x) = todo.pop() {
                if !std::mem::replace(&mut seen[x], true) {
                    todo.extend(&next[x]);
                }
            }
            seen
        })
        .collect();
    let kernels: Vec<usize> = (0..n)
        .filter(|&i| {
            let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: a node of the live graph; a valid out pointer.
            let r = unsafe { sys::cuGraphNodeGetType(nodes[i], &mut t) };
            r == sys::CUresult::CUDA_SUCCESS && t == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
        })
        .collect();
    for (x, &a) in kernels.iter().enumerate() {
        for &b in &kernels[x + 1..] {
            if !reach[a][b] && !reach[b][a] {
                return Err(format!(
                    "the captured graph has {} kernel nodes, and two of them (nodes {a} and {b} of {n}) lie on no common path: they may run at once",
                    kernels.len()
                ));
            }
        }
    }
    if kernels.len() < 10 {
        return Err(format!(
            "the captured graph has only {} kernel nodes",
            kernels.len()
        ));
    }
    Ok(())
}

/// What [`graph`] runs.
#[derive(Debug, Clone)]
pub struct GraphOpts {
    /// Replays, each with new inputs and every result checked.
    pub replays: usize,
    /// The implementation the captured calls must choose.
    pub expect: Option<String>,
    /// The last rank captures call 3 with half the count.
    pub mismatch: bool,
    /// The last rank stops replaying after that many.
    pub stop_after: Option<usize>,
    /// Bytes per block (64 KiB by default).
    pub block: usize,
    /// Eager calls on another stream just before and after each replay, not
    /// waiting for it: ferrocx must keep them and the replay apart.
    pub mixed: bool,
    /// Odd calls captured on a stream forked from the capture's.
    pub fork: bool,
    /// Replays timed back to back after the checked ones (per call reported).
    pub timed: usize,
    /// The capture's mode (relaxed, global as torch.cuda.graph's default, thread).
    pub capture: CaptureMode,
    /// An eager all_reduce in flight all through the capture, checked after it.
    pub held: bool,
    /// After the checked replays, this many more, then deregistration and
    /// destroy without waiting; the last replay's results checked.
    pub early_destroy: usize,
}

/// all_gather (or `kind`) on device windows in a loop until an error; rank
/// `victim` SIGKILLs itself after `kill_after_ms`. A survivor passes when its
/// error names the victim (the ce watchdog released its stream).
pub fn loop_until_error(
    size: usize,
    victim: usize,
    kill_after_ms: u64,
    kind: CollKind,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    if victim == me {
        super::kill_self_after(kill_after_ms);
    }
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let (send, recv) = (DevMem::new(size)?, DevMem::new(size * n)?);
    // SAFETY: the allocations outlive the windows.
    let (_ws, _wr) = unsafe {
        (
            comm.window_register_device(send.ptr, size).map_err(e2s)?,
            comm.window_register_device(recv.ptr, size * n)
                .map_err(e2s)?,
        )
    };
    let spec = CollSpec::new(kind, DataType::U8, size);
    let choice = comm
        .collective_choice(&spec, send.ptr, recv.ptr, false, true)
        .map_err(e2s)?;
    println!(
        "runs on {} ({})",
        choice.winner(),
        choice.path.as_deref().unwrap_or("-")
    );
    let start = std::time::Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < std::time::Duration::from_secs(120) {
        // SAFETY: live stream and windows; synchronized below.
        let r = unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, &stream) }
            .map_err(e2s)
            .and_then(|_| sync(&stream))
            .and_then(|_| comm.device_error().map_err(e2s));
        match r {
            Ok(()) => iters += 1,
            Err(e) => {
                println!(
                    "ERROR after {iters} iterations, {:.2}s: {e}",
                    start.elapsed().as_secs_f64()
                );
                return if e.contains(&format!("rank {victim}")) {
                    Ok(format!("rank {me}: {e}"))
                } else {
                    Err(format!("unexpected error: {e}"))
                };
            }
        }
    }
    Err(format!("no error after {iters} iterations"))
}
