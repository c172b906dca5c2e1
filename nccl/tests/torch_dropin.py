"""torch.distributed's `nccl` backend on ferrocx's libnccl.so.2, every result checked.

    LD_PRELOAD=PREFIX/lib/libnccl.so.2 torchrun --nproc-per-node 3 nccl/tests/torch_dropin.py

(scripts/gpu-check.sh's `dropin-torch` step; ranks may share one GPU under MPS.)
Checks that the process mapped ferrocx's library and not NVIDIA's, then runs
all_reduce (sum, avg, max; float32 and bfloat16), all_gather, broadcast,
reduce_scatter, all_to_all (equal and uneven splits), send/recv, a subgroup,
and barrier. Prints "TORCH DROPIN PASS rank R of N".
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def fail(msg):
    print(f"rank {os.environ.get('RANK')}: FAIL: {msg}", flush=True)
    sys.exit(1)


def mapped_nccl():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libnccl" in line})


def main():
    if os.environ.get("FXT_DUMP_AFTER"):
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["FXT_DUMP_AFTER"]), exit=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % ndev)
    torch.cuda.set_device(dev)
    # Eager creation (device_id): the process group's communicator serves
    # collectives and point-to-point; new_group splits it.
    dist.init_process_group("nccl", device_id=dev)
    if os.environ.get("FXT_SIDE_STREAM"):
        torch.cuda.set_stream(torch.cuda.Stream())
    # torch may map NVIDIA's copy too (it preloads its pip NCCL by path), but the
    # preloaded library comes first in symbol lookup: the process's ncclGetVersion
    # (what libtorch_cuda.so binds to) must be ferrocx's.
    libs = mapped_nccl()
    want = os.environ.get("FERROCX_NCCL_EXPECT", "")
    if want and want not in libs:
        fail(f"libnccl mapped from {libs}, not {want}")
    v = ctypes.c_int(0)
    ctypes.CDLL(None).ncclGetVersion(ctypes.byref(v))
    if want and v.value != 22700:
        fail(f"ncclGetVersion in the global scope says {v.value}: not ferrocx's drop-in (22700)")

    def check(name, got, want):
        if os.environ.get("FXT_SYNC_FIRST"):
            torch.cuda.synchronize()
        if not torch.equal(got.cpu(), want.cpu()):
            fail(f"{name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")

    n = 4096
    base = torch.arange(n, device=dev, dtype=torch.float32)
    types = (torch.float32,) if os.environ.get("FXT_SKIP_BF16") else (torch.float32, torch.bfloat16)
    for dtype in types:
        t = (base % 64 + rank).to(dtype)
        dist.all_reduce(t)
        check(f"all_reduce sum {dtype}", t, ((base % 64) * world + sum(range(world))).to(dtype))
    t = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("all_reduce avg", t, torch.full((n,), (world + 1) / 2, device=dev))
    t = base + rank
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("all_reduce max", t, base + world - 1)

    mine = base[:1000] + 10000 * rank
    out = torch.empty(1000 * world, device=dev)
    dist.all_gather_into_tensor(out, mine)
    check("all_gather", out, torch.cat([base[:1000] + 10000 * r for r in range(world)]))
    lst = [torch.empty(1000, device=dev) for _ in range(world)]
    dist.all_gather(lst, mine)
    check("all_gather list", torch.cat(lst), out)

    t = base + rank
    dist.broadcast(t, src=world - 1)
    check("broadcast", t, base + world - 1)

    full = torch.arange(1000 * world, device=dev, dtype=torch.float32) + rank
    part = torch.empty(1000, device=dev)
    dist.reduce_scatter_tensor(part, full)
    seg = torch.arange(1000 * world, device=dev, dtype=torch.float32)[rank * 1000:(rank + 1) * 1000]
    check("reduce_scatter", part, seg * world + sum(range(world)))

    send = torch.cat([torch.full((500,), float(rank * 100 + j), device=dev) for j in range(world)])
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    check("all_to_all equal", recv, torch.cat([torch.full((500,), float(r * 100 + rank), device=dev) for r in range(world)]))
    # Uneven: rank r sends j+1 elements to rank j.
    splits_in = [rank + 1] * world
    splits_out = [j + 1 for j in range(world)]
    send = torch.cat([torch.full((j + 1,), float(rank * 100 + j), device=dev) for j in range(world)])
    recv = torch.empty(sum(splits_in), device=dev)
    dist.all_to_all_single(recv, send, output_split_sizes=splits_in, input_split_sizes=splits_out)
    check("all_to_all uneven", recv, torch.cat([torch.full((rank + 1,), float(r * 100 + rank), device=dev) for r in range(world)]))

    # Ring of sends and receives, batched, then a plain pair.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out_t = base + 1000 * rank
    in_t = torch.empty_like(base)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out_t, nxt), dist.P2POp(dist.irecv, in_t, prv)])
    for r in reqs:
        r.wait()
    check("ring send/recv", in_t, base + 1000 * prv)
    if world >= 2 and rank < 2:
        t = base + 7 if rank == 0 else torch.empty_like(base)
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        check("send/recv", t, base + 7)

    ranks = list(range(0, world, 2))
    sub = dist.new_group(ranks)
    if rank in ranks:
        t = torch.full((64,), float(rank), device=dev)
        dist.all_reduce(t, group=sub)
        check("subgroup all_reduce", t, torch.full((64,), float(sum(ranks)), device=dev))

    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"TORCH DROPIN PASS rank {rank} of {world} (ncclGetVersion {v.value}; mapped {libs})", flush=True)


if __name__ == "__main__":
    main()
