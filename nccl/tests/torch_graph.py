"""torch.cuda.graph over ferrocx's libnccl.so.2: collectives captured the way torch users
capture them (global capture mode, torch's default), replayed with new inputs, every
result checked, with eager collectives between the replays, and ncclMemAlloc / ncclMemFree
called during the capture (as torch's NCCL memory pool does when it grows).

    LD_PRELOAD=PREFIX/lib/libnccl.so.2 torchrun --nproc-per-node 2 nccl/tests/torch_graph.py

(scripts/gpu-check.sh's `dropin-graph` step; ranks may share one GPU under MPS.)
FXT_CAPTURE_MODE: global (default), thread_local or relaxed. FXT_REPLAYS: replays per
size (default 50). Prints "TORCH GRAPH PASS rank R of N".
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def fail(msg):
    print(f"rank {os.environ.get('RANK')}: FAIL: {msg}", flush=True)
    sys.exit(1)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % ndev)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    mode = os.environ.get("FXT_CAPTURE_MODE", "global")
    nccl = ctypes.CDLL(None)  # the preloaded library's symbols come first
    replays = int(os.environ.get("FXT_REPLAYS", "50"))

    def check(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            fail(f"{name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")

    # 8 B, 4 KiB, 256 KiB of float32.
    for n in (2, 1024, 65536):
        base = torch.arange(n, device=dev, dtype=torch.float32)
        x = torch.zeros(n, device=dev)  # all_reduce in place
        g_in = torch.zeros(n, device=dev)
        g_out = torch.zeros(n * world, device=dev)
        b = torch.zeros(n, device=dev)  # broadcast in place
        rs_in = torch.zeros(n * world, device=dev)
        rs_out = torch.zeros(n, device=dev)

        def calls():
            dist.all_reduce(x)
            dist.all_gather_into_tensor(g_out, g_in)
            dist.broadcast(b, src=world - 1)
            dist.reduce_scatter_tensor(rs_out, rs_in)

        # torch's recipe: warm up on a side stream, then capture.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                calls()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            calls()
            if n == 2:
                # What torch's NCCL memory pool does when it grows during a
                # capture: ncclMemAlloc and ncclMemFree must not be refused.
                p = ctypes.c_void_p()
                r = nccl.ncclMemAlloc(ctypes.byref(p), ctypes.c_size_t(1 << 20))
                if r != 0 or not p.value:
                    fail(f"ncclMemAlloc during a {mode} capture returned {r}")
                r = nccl.ncclMemFree(p)
                if r != 0:
                    fail(f"ncclMemFree during a {mode} capture returned {r}")
        torch.cuda.synchronize()

        for rep in range(replays):
            v = float(rep % 97)
            x.copy_(base % 61 + rank + v)
            g_in.copy_(base + 1000 * rank + v)
            b.copy_(base + rank + v)
            rs_in.copy_(torch.arange(n * world, device=dev, dtype=torch.float32) % 53 + rank + v)
            graph.replay()
            # An eager collective between replays, on the current stream.
            e = torch.full((n,), float(rank + rep), device=dev)
            dist.all_reduce(e)
            torch.cuda.synchronize()
            what = f"{4 * n} B, replay {rep}"
            check(f"all_reduce {what}", x, (base % 61 + v) * world + sum(range(world)))
            check(f"all_gather {what}", g_out, torch.cat([base + 1000 * r + v for r in range(world)]))
            check(f"broadcast {what}", b, base + world - 1 + v)
            full = torch.arange(n * world, device=dev, dtype=torch.float32) % 53
            seg = full[rank * n:(rank + 1) * n]
            check(f"reduce_scatter {what}", rs_out, (seg + v) * world + sum(range(world)))
            check(f"eager all_reduce {what}", e, torch.full((n,), float(sum(range(world)) + rep * world), device=dev))
        del graph

    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"TORCH GRAPH PASS rank {rank} of {world} ({mode} capture, {replays} replays per size)", flush=True)


if __name__ == "__main__":
    main()
