#!/usr/bin/env python3
"""NCCL measured with one process per GPU, through torch.distributed (NCCL backend).

    python3 scripts/nccl-torch-bench.py OUTDIR [--np 2] [-b 8] [-e 1G] [-f 2] [-n 20] [-w 5] [BENCH...]

The baseline for fxperf --mem cuda where nccl-tests cannot run its MPI build (no MPI on
the host): nccl-tests -g 2 drives both GPUs from one process, this drives each from its
own process, as fxperf does. Writes OUTDIR/torch-<bench>.log in nccl-tests' column
layout (so scripts/bench-compare.py DIR MIN torch reads it), one file per bench of
sendrecv alltoall all_gather all_reduce reduce_scatter broadcast.

Sizes, bus bandwidth and timing follow nccl-tests: float32 (sum for reductions); the
time is the mean per call over -n calls queued back to back after -w warm-up calls
and a barrier, the maximum over ranks. torch.distributed's all_reduce and broadcast
work in place only, so their out-of-place columns read N/A; alltoall and sendrecv
report out of place only. Every row is checked once (one untimed call on known data,
#wrong as nccl-tests counts it). Each call goes through Python and c10d, which adds
a few microseconds that nccl-tests does not pay: compare small messages with care.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
import argparse
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

BENCHES = ["sendrecv", "alltoall", "all_gather", "all_reduce", "reduce_scatter", "broadcast"]


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def sizes(a):
    s = a.b
    while s <= a.e:
        yield s
        s = s * a.f if a.f > 1 else s + 1


def shape(bench, size, n):
    """(elements per rank's input, elements of the output, size column, busbw factor)."""
    es = 4
    if bench in ("all_gather", "reduce_scatter", "alltoall"):
        total = max(size // es // n, 1) * n
        part = total // n
        factor = (n - 1) / n
        if bench == "all_gather":
            return part, total, total * es, factor
        if bench == "reduce_scatter":
            return total, part, total * es, factor
        return total, total, total * es, factor
    count = max(size // es, 1) if size else 0
    factor = 2 * (n - 1) / n if bench == "all_reduce" else 1.0
    return count, count, count * es, factor


def rank_main(rank, a):
    import torch
    import torch.distributed as dist

    n = a.np
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=dev)
    peer_next, peer_prev = (rank + 1) % n, (rank - 1) % n

    def call(bench, inp, out, in_place):
        if bench == "sendrecv":
            ops = [dist.P2POp(dist.isend, inp, peer_next), dist.P2POp(dist.irecv, out, peer_prev)]
            for r in dist.batch_isend_irecv(ops):
                r.wait()
        elif bench == "alltoall":
            dist.all_to_all_single(out, inp)
        elif bench == "all_gather":
            src = out.narrow(0, rank * inp.numel(), inp.numel()) if in_place else inp
            dist.all_gather_into_tensor(out, src)
        elif bench == "reduce_scatter":
            dst = inp.narrow(0, rank * out.numel(), out.numel()) if in_place else out
            dist.reduce_scatter_tensor(dst, inp)
        elif bench == "all_reduce":
            dist.all_reduce(out)
        elif bench == "broadcast":
            dist.broadcast(out, 0)

    def fill(bench, inp, out, in_place):
        """Known inputs: rank r's input element i is (r + 1) * 1000 + i % 1000."""
        idx = torch.arange(inp.numel(), device=dev, dtype=torch.float32).remainder_(1000)
        inp.copy_(idx + (rank + 1) * 1000)
        out.fill_(-1.0)
        if in_place and bench == "all_gather":
            out.narrow(0, rank * inp.numel(), inp.numel()).copy_(inp)
        if bench in ("all_reduce", "broadcast"):
            out.copy_(inp)

    def wrong(bench, inp, out, in_place):
        k = inp.numel()
        i = torch.arange(max(k, out.numel()), device=dev, dtype=torch.float32).remainder_(1000)
        if bench == "sendrecv":
            want = i[:k] + (peer_prev + 1) * 1000
            got = out
        elif bench == "alltoall":
            blk = k // n
            want = torch.cat([i[rank * blk:(rank + 1) * blk] + (q + 1) * 1000 for q in range(n)])
            got = out
        elif bench == "all_gather":
            want = torch.cat([i[:k] + (q + 1) * 1000 for q in range(n)])
            got = out
        elif bench == "reduce_scatter":
            m = out.numel()
            want = i[rank * m:(rank + 1) * m] * n + 1000 * n * (n + 1) / 2
            got = inp.narrow(0, rank * m, m) if in_place else out
        elif bench == "all_reduce":
            want = i[:k] * n + 1000 * n * (n + 1) / 2
            got = out
        else:  # broadcast from rank 0
            want = i[:k] + 1000
            got = out
        return int((got != want).sum().item())

    files = {}
    for bench in a.benches:
        if rank == 0:
            f = open(os.path.join(a.outdir, f"torch-{bench}.log"), "w")
            files[bench] = f
            f.write(f"# torch.distributed {bench}: torch {torch.__version__}, NCCL "
                    f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {n} processes, one GPU each "
                    f"({torch.cuda.get_device_name(0)}), iters {a.n}, warmup {a.w}\n")
            f.write("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
                    "     time   algbw   busbw  #wrong\n")
            f.write("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
                    "     (us)  (GB/s)  (GB/s)\n")
        for size in sizes(a):
            nin, nout, col, factor = shape(bench, size, n)
            inp = torch.empty(nin, device=dev, dtype=torch.float32)
            out = torch.empty(nout, device=dev, dtype=torch.float32)
            cols = []
            for in_place in (False, True):
                if (in_place and bench in ("sendrecv", "alltoall")) or (
                        not in_place and bench in ("all_reduce", "broadcast")):
                    cols.append(None)
                    continue
                fill(bench, inp, out, in_place)
                call(bench, inp, out, in_place)
                torch.cuda.synchronize()
                bad = wrong(bench, inp, out, in_place)
                for _ in range(a.w):
                    call(bench, inp, out, in_place)
                torch.cuda.synchronize()
                dist.barrier(device_ids=[rank])
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(a.n):
                    call(bench, inp, out, in_place)
                e1.record()
                torch.cuda.synchronize()
                t = torch.tensor([e0.elapsed_time(e1) * 1e3 / a.n, bad], device=dev, dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                us, bad = t[0].item(), int(t[1].item())
                algbw = col / us / 1e3 if us > 0 else 0.0
                cols.append((us, algbw, algbw * factor, bad))
            if rank == 0:
                red = "sum" if bench in ("all_reduce", "reduce_scatter") else "none"
                root = "0" if bench == "broadcast" else "-1"
                line = f"{col:12d} {col // 4:13d} {'float':>9} {red:>7} {root:>7}"
                for c in cols:
                    line += ("     N/A     N/A     N/A     N/A" if c is None else
                             f" {c[0]:8.2f} {c[1]:7.2f} {c[2]:7.2f} {c[3]:7d}")
                files[bench].write(line + "\n")
                files[bench].flush()
    for f in files.values():
        f.close()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("-b", type=size_arg, default=8)
    p.add_argument("-e", type=size_arg, default=1 << 30)
    p.add_argument("-f", type=int, default=2)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("benches", nargs="*", default=BENCHES)
    a = p.parse_args()
    for b in a.benches:
        if b not in BENCHES:
            sys.exit(f"unknown bench {b!r}; one of {' '.join(BENCHES)}")
    os.makedirs(a.outdir, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    import torch.multiprocessing as mp

    mp.spawn(rank_main, args=(a,), nprocs=a.np, join=True)


if __name__ == "__main__":
    main()
