#!/usr/bin/env python3
"""Turn repeated runs of fxperf, Open MPI and memcpy into one markdown table.

Usage: compare.py OUTDIR  (files fx.N, ompi.N, fxr0.N, lat-fx.N, lat-ompi.N, memcpy1.N, memcpy2.N)
Per size: median over runs of busbw (GB/s) and time (us); ratio = ferrocx / Open MPI.
"""
import glob
import os
import statistics
import sys


def table(path):
    """{size: (time_us, busbw)} from an nccl-tests style table."""
    rows = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 8 and f[0].isdigit() and not line.startswith("#"):
            try:
                rows[int(f[0])] = (float(f[5]), float(f[7]))
            except ValueError:
                pass
    return rows


def memcpy(path):
    """{size: median GB/s} from bench/build/memcpy output."""
    rows = {}
    for line in open(path):
        f = line.split()
        if len(f) == 6 and f[0].isdigit():
            rows[int(f[0])] = float(f[5])
    return rows


def medians(pattern, parse, idx=None):
    runs = [parse(p) for p in sorted(glob.glob(pattern))]
    sizes = sorted(set().union(*[r.keys() for r in runs])) if runs else []
    out = {}
    for s in sizes:
        vals = [r[s] if idx is None else r[s][idx] for r in runs if s in r]
        out[s] = statistics.median(vals)
    return out, len(runs)


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def main():
    d = sys.argv[1]
    fx, nfx = medians(os.path.join(d, "fx.*"), table, 1)
    fxt, _ = medians(os.path.join(d, "fx.*"), table, 0)
    r0, _ = medians(os.path.join(d, "fxr0.*"), table, 1)
    om, nom = medians(os.path.join(d, "ompi.*"), table, 1)
    omt, _ = medians(os.path.join(d, "ompi.*"), table, 0)
    m1, _ = medians(os.path.join(d, "memcpy1.*"), memcpy)
    m2, _ = medians(os.path.join(d, "memcpy2.*"), memcpy)
    print(f"Medians of {nfx} ferrocx and {nom} Open MPI runs, interleaved.\n")
    print("| size | ferrocx time (us) | Open MPI time (us) | ferrocx busbw -R 1 (GB/s) | ferrocx busbw -R 0 | Open MPI busbw | ratio (-R 1 / OMPI) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted(fx):
        if s not in om:
            continue
        ratio = fx[s] / om[s] if om[s] > 0 else float("nan")
        print(f"| {human(s)} | {fxt[s]:.2f} | {omt[s]:.2f} | {fx[s]:.2f} | {r0.get(s, float('nan')):.2f} | {om[s]:.2f} | {ratio:.2f} |")
    big = [s for s in m1 if s >= 16 << 20]
    if big:
        c1 = statistics.median(m1[s] for s in big)
        c2 = statistics.median(m2[s] for s in big) if m2 else float("nan")
        fxbig = statistics.median(fx[s] for s in fx if s >= 16 << 20)
        ombig = statistics.median(om[s] for s in om if s >= 16 << 20)
        print()
        print(f"memcpy ceiling at >= 16 MiB: one core {c1:.2f} GB/s; two cores copying at once {c2:.2f} GB/s each.")
        print(f"ferrocx (-R 1) at >= 16 MiB: {fxbig:.2f} GB/s = {100 * fxbig / c1:.0f}% of one core, {100 * fxbig / c2:.0f}% of the two-copier ceiling; Open MPI {ombig:.2f} GB/s; ratio {fxbig / ombig:.2f}.")
    lf, nl = medians(os.path.join(d, "lat-fx.*"), table, 0)
    lo, _ = medians(os.path.join(d, "lat-ompi.*"), table, 0)
    if lf and lo:
        print()
        print(f"Latency (medians of {nl} runs, -n 10000): " + ", ".join(f"{human(s)}: ferrocx {lf[s]:.2f} us / Open MPI {lo[s]:.2f} us" for s in sorted(lf) if s in lo and s <= 4096))


if __name__ == "__main__":
    main()
