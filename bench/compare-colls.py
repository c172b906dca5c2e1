#!/usr/bin/env python3
"""Markdown tables from bench/compare-colls.sh's outputs.

Usage: compare-colls.py OUTDIR   (files fx.<coll>.np<N>.<round>, ompi.<coll>.np<N>.<round>)

Per rank count, collective and size: the median over rounds of the
out-of-place time (us) of fxperf and of Open MPI, the busbw (GB/s) at that
median time (recomputed from count, type and nccl-tests' factors, so it is
not limited to the tables' 2 decimals), the busbw ratio ferrocx / Open MPI
(> 1: ferrocx faster; = Open MPI time / ferrocx time) and, up to 64 KiB, the time
ratio ferrocx / Open MPI (< 1: ferrocx faster). Rows whose count is 0 (small
sizes of the per-rank-block collectives, as in nccl-tests) are left out.
A summary gives, per collective, the median ratios over sizes >= 1 MiB
(bandwidth) and over sizes <= 4 KiB (latency).
"""
import glob
import os
import re
import statistics
import sys
from collections import defaultdict

SMALL = 64 << 10


ES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
      "half": 2, "bfloat16": 2, "float": 4, "double": 8}


def bus_bytes(coll, n, count, es):
    """Bytes that, divided by the time, give nccl-tests' busbw."""
    if coll == "all_reduce":
        return count * es * 2 * (n - 1) / n
    if coll in ("broadcast", "reduce", "sendrecv"):
        return count * es
    return count * es * n * (n - 1) / n


def table(path):
    """({size: (time_us, in-place time_us or None, count, eltsize)}, total #wrong or None if unchecked)."""
    rows, wrong = {}, 0
    checked = False
    for line in open(path):
        if line.startswith("#"):
            continue
        f = line.split()
        # bench/mpi/sendrecv.c prints 9 columns (no in-place half).
        if len(f) == 9 and f[0].isdigit():
            f = f[:8] + [f[8], "N/A", "N/A", "N/A", "N/A"]
        if len(f) != 13 or not f[0].isdigit():
            continue
        size, count = int(f[0]), int(f[1])
        for w in (f[8], f[12]):
            if w != "N/A":
                checked = True
                wrong += int(w)
        if count == 0:
            continue
        try:
            ip = float(f[9])
        except ValueError:
            ip = None
        rows[size] = (float(f[5]), ip, count, ES.get(f[2], 4))
    return rows, (wrong if checked else None)


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    if n >= 1 << 10:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def med(runs, size, idx):
    vals = [r[size][idx] for r in runs if size in r and r[size][idx] is not None]
    return statistics.median(vals) if vals else None


def busbw(runs, size, idx, coll, n):
    """busbw (GB/s) at the median time: exact, where the tables round to 2 decimals."""
    t = med(runs, size, idx)
    some = next((r[size] for r in runs if size in r), None)
    if not t or some is None:
        return None
    return bus_bytes(coll, n, some[2], some[3]) / (t * 1e3)


def fmt(v, spec=".2f"):
    return "—" if v is None else format(v, spec)


def main():
    d = sys.argv[1]
    groups = defaultdict(lambda: {"fx": [], "ompi": []})
    wrong = defaultdict(int)
    missing = []
    for p in sorted(glob.glob(os.path.join(d, "*.np*.*"))):
        m = re.match(r"(fx|ompi)\.(\w+)\.np(\d+)\.(\d+)$", os.path.basename(p))
        if not m:
            continue
        side, coll, np_ = m.group(1), m.group(2), int(m.group(3))
        rows, w = table(p)
        if not rows:
            missing.append(os.path.basename(p))
            continue
        groups[(np_, coll)][side].append(rows)
        if w is None:
            wrong[side, "unchecked"] += 1
        else:
            wrong[side] += w
    order = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast",
             "reduce", "gather", "scatter", "alltoallv"]
    keys = sorted(groups, key=lambda k: (k[0], order.index(k[1]) if k[1] in order else 99, k[1]))
    summary = []
    for np_, coll in keys:
        g = groups[(np_, coll)]
        fx, om = g["fx"], g["ompi"]
        sizes = sorted(set().union(*[r.keys() for r in fx + om]))
        print(f"### {coll}, {np_} ranks ({len(fx)} fxperf and {len(om)} Open MPI runs, medians)\n")
        print("| size | fxperf time (us) | Open MPI time (us) | time ratio fx/OMPI | fxperf busbw (GB/s) | fxperf in-place busbw | Open MPI busbw | busbw ratio fx/OMPI |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        big, small = [], []
        for s in sizes:
            ft, ot = med(fx, s, 0), med(om, s, 0)
            fb, fi, ob = busbw(fx, s, 0, coll, np_), busbw(fx, s, 1, coll, np_), busbw(om, s, 0, coll, np_)
            # Same bytes and factor on both sides: the busbw ratio is the
            # inverse time ratio (the tables' busbw has only 2 decimals).
            br = ot / ft if ft and ot else None
            tr = ft / ot if ft is not None and ot and s <= SMALL else None
            if br is not None and s >= 1 << 20:
                big.append(br)
            if ft is not None and ot and s <= 4096:
                small.append(ft / ot)
            print(f"| {human(s)} | {fmt(ft)} | {fmt(ot)} | {fmt(tr)} | {fmt(fb, '.3g')} | {fmt(fi, '.3g')} | {fmt(ob, '.3g')} | {fmt(br)} |")
        print()
        summary.append((np_, coll,
                        statistics.median(big) if big else None, min(big) if big else None, max(big) if big else None,
                        statistics.median(small) if small else None))
    # One compact table per rank count: busbw per size and collective.
    for np_ in sorted({k[0] for k in keys}):
        colls = [k[1] for k in keys if k[0] == np_]
        sizes = sorted(set().union(*[r.keys() for c in colls for r in groups[(np_, c)]["fx"] + groups[(np_, c)]["ompi"]]))
        print(f"### busbw at {np_} ranks (GB/s, medians): fxperf / Open MPI (ratio)\n")
        print("| size | " + " | ".join(colls) + " |")
        print("|---:|" + "---:|" * len(colls))
        for s in sizes:
            cells = []
            for c in colls:
                g = groups[(np_, c)]
                fb, ob = busbw(g["fx"], s, 0, c, np_), busbw(g["ompi"], s, 0, c, np_)
                ft, ot = med(g["fx"], s, 0), med(g["ompi"], s, 0)
                if fb is None or ob is None or not ft or not ot:
                    cells.append("—")
                else:
                    cells.append(f"{fb:.3g} / {ob:.3g} ({ot / ft:.2f})")
            print(f"| {human(s)} | " + " | ".join(cells) + " |")
        print()
    print("### Summary\n")
    print("| ranks | collective | busbw ratio fx/OMPI, median over sizes >= 1 MiB (min–max) | time ratio fx/OMPI, median over sizes <= 4 KiB |")
    print("|---:|---|---:|---:|")
    for np_, coll, b, lo, hi, t in summary:
        rng = f" ({lo:.2f}–{hi:.2f})" if b is not None else ""
        print(f"| {np_} | {coll} | {fmt(b)}{rng} | {fmt(t)} |")
    print()
    print(f"#wrong over every row: fxperf {wrong['fx']}, Open MPI {wrong['ompi']}"
          + (f"; unchecked files: fx {wrong['fx', 'unchecked']}, ompi {wrong['ompi', 'unchecked']}"
             if wrong['fx', 'unchecked'] or wrong['ompi', 'unchecked'] else "")
          + (f"; files without rows (failed runs): {', '.join(missing)}" if missing else ""))


if __name__ == "__main__":
    main()
