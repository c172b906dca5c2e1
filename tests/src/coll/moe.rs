//! The MoE all-to-all-v of issue 20 on ibgda's device API: per step, every
//! rank's tokens choose `k` of `n × EXPERTS` experts at random (counts vary
//! per rank, peer and step); the ranks all-gather their counts; a kernel
//! *dispatches* each token to the ranks of its experts with `fxg_put`
//! (`ferrocx_ibgda::moe::dispatch` plans where), quiets, and adds 1 to the
//! receiver's signal word for this sender; the receivers wait for every
//! sender's signal; an "expert" kernel transforms what arrived; a second
//! exchange *combines* the outputs back to their origins. The origin checks
//! that each of its tokens came back transformed at every slot its routing
//! names (every byte), so a misplaced, lost or doubled put fails the step.
//!
//! `devnet-moe STEPS TOKENS HIDDEN K [--bench] [--host]`: at most TOKENS
//! tokens of HIDDEN bytes per rank and step. With `--bench` the checks still
//! run and the time of the two exchanges is printed per step (median). With
//! `--host` the same exchanges take the host-initiated path on the same
//! buffers instead: each rank packs its tokens per destination with copies,
//! then one group of device sends and receives (one message per peer), as
//! frameworks do with NCCL; the checks are the same.

use super::device::{sync, DevMem};
use super::devnet::{read_out, start, HEADER};
use super::e2s;
use ferrocx::Communicator;
use ferrocx_ibgda::moe::{self, Counts, Put, Routing};
use ferrocx_sdk::cuda::{self, sys, Stream};
use std::time::Instant;

const KERNELS: &str = r#"
struct fx_put { unsigned long long peer, src, dst, bytes; };

/* Thread p (< nranks, not this rank) puts this rank's share to rank p, waits
   for them (quiet), then adds 1 to p's signal word slot + me, then waits for
   p's signal to reach target. (This rank's own share is copied by the host
   on the stream before.) */
extern "C" __global__ void fx_moe_exchange(const struct fxg_view* v, unsigned win,
        const struct fx_put* puts, unsigned nputs,
        unsigned long long src_at, unsigned long long dst_at, unsigned long long slot,
        unsigned long long target, unsigned long long timeout, unsigned long long* out) {
    const unsigned me = v->rank, n = v->nranks, p = threadIdx.x;
    if (p < n && p != me) {
        const struct fxg_queue q = fxg_queue_to(v, p);
        fxg_u8* cq = fxg_cq_to(v, p);
        int worst = 0;
        unsigned posted = 0;
        for (unsigned i = 0; i < nputs && worst == 0; ++i) {
            if (puts[i].peer != p) continue;
            ++posted;
            if (fxg_put(q, win, dst_at + puts[i].dst, src_at + puts[i].src,
                        (fxg_u32)puts[i].bytes, timeout) == ~0ull) worst = FXG_STATUS_TIMEOUT;
            struct fxg_completion c;
            if ((posted & 7) == 0)
                while (fxg_cq_poll(cq, &c)) if (c.status != FXG_STATUS_OK && worst == 0) worst = c.status;
        }
        if (worst == 0) worst = fxg_quiet(q, cq, timeout);
        if (worst == 0) {
            if (fxg_put_signal(q, win, 0, 0, 0, 8 * (slot + me), 1, FXG_SIGNAL_ADD, timeout) == ~0ull)
                worst = FXG_STATUS_TIMEOUT;
            else
                worst = fxg_quiet(q, cq, timeout);
        }
        out[p] = worst;
    }
    if (p < n && p != me)
        out[n + p] = fxg_signal_wait_until(fxg_signals(v) + slot + p, FXG_CMP_GE, target, timeout);
}

/* The "expert": every byte + 1. */
extern "C" __global__ void fx_moe_expert(unsigned char* base, unsigned long long in_at,
        unsigned long long out_at, unsigned long long bytes) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < bytes;
         i += (unsigned long long)gridDim.x * blockDim.x)
        base[out_at + i] = (unsigned char)(((volatile unsigned char*)base)[in_at + i] + 1);
}
"#;

const EXPERTS_PER_RANK: usize = 4;
const TIMEOUT_NS: u64 = 10_000_000_000;

/// A SplitMix64 step (per rank and step seeds: every rank's draw differs).
fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn token_byte(rank: usize, step: usize, t: usize, i: usize) -> u8 {
    (i.wrapping_mul(37) ^ t.wrapping_mul(101) ^ (rank * 13 + step * 7)) as u8
}

fn encode(puts: &[Put]) -> Vec<u8> {
    puts.iter()
        .flat_map(|p| [p.peer as u64, p.src, p.dst, p.bytes])
        .flat_map(u64::to_le_bytes)
        .collect()
}

/// See the module documentation.
pub fn run(
    steps: usize,
    tokens: usize,
    hidden: usize,
    k: usize,
    bench: bool,
    host: bool,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let dev = comm.device().ok_or("no GPU for this rank")?;
    let h = hidden as u64;
    // Window: my tokens | received | expert outputs | combine buffer. A rank
    // receives at most n × tokens tokens (and gets as many back).
    let area = (n * tokens * hidden) as u64;
    let (tok_at, recv_at, out_at, comb_at) = (0u64, (tokens * hidden) as u64, 0u64, 0u64);
    let out_at = out_at + recv_at + area;
    let comb_at = comb_at + out_at + area;
    // The host path's packing area (a rank sends at most n × tokens tokens).
    let stage_at = comb_at + area;
    let bytes = (stage_at + area) as usize;
    let buf = DevMem::new(bytes)?;
    buf.upload(&vec![0u8; bytes])?;
    // SAFETY: `buf` outlives the window (deregistered below).
    let w = unsafe { comm.window_register_device(buf.ptr, bytes) }.map_err(e2s)?;
    let dn = comm.devnet_open().map_err(e2s)?;
    let win = comm.devnet_window_register(&dn, &w).map_err(e2s)?;
    let view = dn.device_view().map_err(e2s)?;
    let src = format!("{HEADER}\n{KERNELS}");
    let exchange = ferrocx_sdk::kernels::load_source(dev, &src, "moe.cu", "fx_moe_exchange")?;
    let expert = ferrocx_sdk::kernels::load_source(dev, &src, "moe.cu", "fx_moe_expert")?;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let out = DevMem::new(16 * n)?;
    let puts_mem = DevMem::new(32 * n * tokens.max(1) + 32)?;
    let mut times = Vec::new();
    let mut moved = 0u64;
    for step in 0..steps {
        let mut seed = (me as u64) << 32 | step as u64;
        let t_count = (mix(&mut seed) % (tokens as u64 + 1)) as usize;
        let experts: Vec<Vec<u32>> = (0..t_count)
            .map(|_| {
                (0..k)
                    .map(|_| (mix(&mut seed) % (n * EXPERTS_PER_RANK) as u64) as u32)
                    .collect()
            })
            .collect();
        let routing = Routing::new(n, EXPERTS_PER_RANK, &experts).map_err(|e| e.to_string())?;
        let mut rows = vec![0u64; n * n];
        comm.all_gather(&routing.counts(), &mut rows).map_err(e2s)?;
        let counts = Counts::new(rows.chunks(n).map(<[u64]>::to_vec).collect())
            .map_err(|e| e.to_string())?;
        let toks: Vec<u8> = (0..t_count * hidden)
            .map(|i| token_byte(me, step, i / hidden, i % hidden))
            .collect();
        buf.upload(&toks)?;
        let dispatch = moe::dispatch(me, &routing, &counts, h).map_err(|e| e.to_string())?;
        let combine = moe::combine(me, &counts, h).map_err(|e| e.to_string())?;
        let received = counts.layout(me).total * h;
        comm.barrier().map_err(e2s)?;
        let t = Instant::now();
        for (phase, puts, from, to) in [
            (0u64, &dispatch, tok_at, recv_at),
            (1, &combine, out_at, comb_at),
        ] {
            let copy = |d: u64, s: u64, len: u64| {
                // SAFETY: both ranges lie inside `buf` (the plan's offsets are
                // bounded by the areas); the stream is synchronized below.
                let r = unsafe {
                    sys::cuMemcpyAsync(buf.ptr + d, buf.ptr + s, len as usize, stream.raw())
                };
                cuda::check(r, "cuMemcpyAsync").map_err(|e| e.to_string())
            };
            for p in puts.iter().filter(|p| p.peer == me) {
                copy(to + p.dst, from + p.src, p.bytes)?;
            }
            if host {
                let mine = routing.counts();
                let starts = |q: usize| mine[..q].iter().sum::<u64>() * h;
                let mut g = comm.group_start();
                for r in (0..n).filter(|&r| r != me) {
                    // Dispatch: r's tokens land after those of the ranks before
                    // it; combine: this rank's own, back in its send order.
                    let (at, len) = if phase == 0 {
                        (counts.layout(me).starts[r] * h, counts.to(me)[r] * h)
                    } else {
                        (starts(r), mine[r] * h)
                    };
                    if len > 0 {
                        // SAFETY: inside `buf`; the stream is synchronized below.
                        unsafe { g.recv_on(buf.ptr + to + at, len as usize, r, &stream) }
                            .map_err(e2s)?;
                    }
                }
                for q in (0..n).filter(|&q| q != me) {
                    let (at, len) = if phase == 0 {
                        // Pack this rank's tokens for q in q's order, then one send.
                        let first = counts.layout(q).starts[me] * h;
                        for p in puts.iter().filter(|p| p.peer == q) {
                            copy(stage_at + starts(q) + p.dst - first, from + p.src, p.bytes)?;
                        }
                        (stage_at + starts(q), mine[q] * h)
                    } else {
                        // The outputs of q's tokens are contiguous here already.
                        (from + counts.layout(me).starts[q] * h, counts.to(me)[q] * h)
                    };
                    if len > 0 {
                        // SAFETY: inside `buf`; the stream is synchronized below.
                        unsafe { g.send_on(buf.ptr + at, len as usize, q, &stream) }
                            .map_err(e2s)?;
                    }
                }
                g.group_end().map_err(e2s)?;
                if phase == 0 && received > 0 {
                    let (b, i, o2, len) = (buf.ptr, recv_at, out_at, received);
                    start(expert, 64, 128, &stream, &mut kernel_params!(b, i, o2, len))?;
                }
                sync(&stream)?;
                continue;
            }
            puts_mem.upload(&encode(puts))?;
            out.upload(&vec![0u8; 16 * n])?;
            let (pp, np, slot, target, to_ns, o) = (
                puts_mem.ptr,
                puts.len() as u32,
                phase * n as u64,
                step as u64 + 1,
                TIMEOUT_NS,
                out.ptr,
            );
            start(
                exchange,
                1,
                128,
                &stream,
                &mut kernel_params!(view, win, pp, np, from, to, slot, target, to_ns, o),
            )?;
            if phase == 0 && received > 0 {
                let (b, i, o2, len) = (buf.ptr, recv_at, out_at, received);
                start(expert, 64, 128, &stream, &mut kernel_params!(b, i, o2, len))?;
            }
            sync(&stream)?;
            let o = read_out(&out)?;
            if let Some(p) = (0..n).find(|&p| p != me && (o[p] != 0 || o[n + p] != 0)) {
                return Err(format!(
                    "rank {me} step {step} {}: with rank {p} the puts ended with status {} and the wait with {} ({:?})",
                    if phase == 0 { "dispatch" } else { "combine" },
                    o[p], o[n + p], dn.status()
                ));
            }
        }
        times.push(t.elapsed().as_secs_f64());
        moved += dispatch
            .iter()
            .chain(&combine)
            .filter(|p| p.peer != me)
            .map(|p| p.bytes)
            .sum::<u64>();
        // Each token back, transformed, at every slot its routing names.
        let back = routing.counts().iter().sum::<u64>() as usize * hidden;
        let mut got = vec![0u8; back];
        if back > 0 {
            let mut all = vec![0u8; (comb_at as usize) + back];
            buf.download(&mut all)?;
            got.copy_from_slice(&all[comb_at as usize..]);
        }
        for t in 0..t_count {
            for s in routing.combine_slots(t) {
                let at = s as usize * hidden;
                if let Some(i) =
                    (0..hidden).find(|&i| got[at + i] != token_byte(me, step, t, i).wrapping_add(1))
                {
                    return Err(format!(
                        "rank {me} step {step}: token {t} came back wrong at slot {s}, byte {i}: {:#x}, expected {:#x}",
                        got[at + i],
                        token_byte(me, step, t, i).wrapping_add(1)
                    ));
                }
            }
        }
        comm.barrier().map_err(e2s)?;
    }
    dn.status().map_err(e2s)?;
    let s = dn.stats().map_err(e2s)?;
    dn.window_deregister(win).map_err(e2s)?;
    dn.close().map_err(e2s)?;
    comm.window_deregister(w).map_err(e2s)?;
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(format!(
        "rank {me}: {steps} MoE steps (up to {tokens} tokens of {hidden} B, k={k}, {n} ranks × {EXPERTS_PER_RANK} experts) dispatched and combined {}, every byte checked; {moved} B to peers; {}requests {} failovers {}",
        if host { "by host-initiated sends and receives" } else { "by kernels' puts" },
        if bench { format!("median dispatch+combine {:.1} us, ", median * 1e6) } else { String::new() },
        s.requests, s.failovers
    ))
}
