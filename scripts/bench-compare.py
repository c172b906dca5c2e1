#!/usr/bin/env python3
"""Side-by-side bus bandwidth of fxperf and nccl-tests logs (same column layout).

    scripts/bench-compare.py DIR [MIN_BYTES] [PEER]

DIR holds fxperf-<bench>.log and PEER-<bench>.log: PEER is nccl (nccl-tests, the
default) or torch (scripts/nccl-torch-bench.py), as scripts/gpu-check.sh writes them.
Prints, per bench and size >= MIN_BYTES (default 1 MiB), out-of-place and in-place
busbw for both and the ratio ferrocx / peer (N/A where either side has no number).
"""
import os
import sys


def rows(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        f = line.split()
        if len(f) < 13 or line.lstrip().startswith("#"):
            continue
        try:
            size = int(f[0])
        except ValueError:
            continue
        out[size] = num(f[5]), num(f[7]), num(f[9]), num(f[11])
    return out


def num(s):
    try:
        return float(s)
    except ValueError:
        return None


def fmt(x, spec="{:7.1f}"):
    return spec.format(x) if x is not None else "    N/A"


def main():
    d = sys.argv[1]
    lo = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    peer = sys.argv[3] if len(sys.argv) > 3 else "nccl"
    benches = ["sendrecv", "alltoall", "all_gather", "all_reduce", "reduce_scatter", "broadcast"]
    for b in benches:
        fx, nc = rows(f"{d}/fxperf-{b}.log"), rows(f"{d}/{peer}-{b}.log")
        if not fx:
            continue
        print(f"## {b}: busbw GB/s (time us), ferrocx / {peer}")
        print(f"{'size':>12} {'fx oop':>16} {peer + ' oop':>16} {'ratio':>6} {'fx ip':>8} {peer + ' ip':>8} {'ratio':>6}")
        for size in sorted(fx):
            if size < lo:
                continue
            a = fx[size]
            n = nc.get(size, (None,) * 4)
            r = a[1] / n[1] if a[1] and n[1] else None
            ri = a[3] / n[3] if a[3] and n[3] else None
            print(f"{size:>12} {fmt(a[1])} ({fmt(a[0], '{:6.0f}')}) {fmt(n[1])} ({fmt(n[0], '{:6.0f}')}) "
                  f"{fmt(r, '{:6.2f}')} {fmt(a[3], '{:8.1f}')} {fmt(n[3], '{:8.1f}')} {fmt(ri, '{:6.2f}')}")
        print()


if __name__ == "__main__":
    main()
