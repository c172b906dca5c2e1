#!/usr/bin/env python3
"""Tables for summary.md from logs/ (fxperf A/B of wip/retire-probe vs main)."""
import math, os, re, statistics as st, sys
D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logs")
COLLS = ["all_reduce", "sendrecv", "broadcast", "all_gather"]
TAGS = ["main", "retire"]
ROUNDS = [1, 2, 3]

def rows(path):
    out = {}
    for line in open(path):
        if re.match(r"^ +\d", line):
            f = line.split()
            ip = None if f[9] == "N/A" else float(f[9])
            out[int(f[0])] = (float(f[5]), ip)
    return out

def spans(path):
    ranks, cur = {}, None
    for line in open(path):
        m = re.match(r"ferrocx rank (\d+): host time per span", line)
        if m:
            cur = int(m.group(1)); ranks[cur] = {}; continue
        if line.startswith(": host time per span"):
            # the header's "ferrocx rank N" was interleaved with the other rank's
            # output (two ranks share stdout): the rank not named elsewhere, marked "1*"
            cur = "1*"; ranks[cur] = {}; continue
        m = re.match(r"^(\S.*?)\s{2,}(\d+)\s+([\d.]+)\s+([\d.]+)$", line)
        if cur is not None and m:
            ranks[cur][m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)))
    return ranks

def fmt_rng(v):
    return f"{min(v):.2f}–{max(v):.2f}"

def gmean(x):
    return math.exp(sum(map(math.log, x)) / len(x))

print("## µs per call, 2 ranks, --mem cuda, -n 2000 -w 200 (min–max over 3 rounds; ratio = median retire / median main)\n")
allr = {}
for c in COLLS:
    d = {(t, r): rows(f"{D}/r{r}-{t}-{c}.log") for t in TAGS for r in ROUNDS}
    sizes = sorted(d[("main", 1)])
    has_ip = d[("main", 1)][sizes[0]][1] is not None
    print(f"### {c}\n")
    hdr = "| size (B) | main out-of-place | retire out-of-place | ratio |"
    sep = "| ---: | ---: | ---: | ---: |"
    if has_ip:
        hdr += " main in-place | retire in-place | ratio |"; sep += " ---: | ---: | ---: |"
    print(hdr); print(sep)
    rs = []
    for s in sizes:
        line = f"| {s} |"
        for k in ([0, 1] if has_ip else [0]):
            m = [d[("main", r)][s][k] for r in ROUNDS]
            x = [d[("retire", r)][s][k] for r in ROUNDS]
            ratio = st.median(x) / st.median(m)
            rs.append(ratio)
            line += f" {fmt_rng(m)} | {fmt_rng(x)} | {ratio:.3f} |"
        print(line)
    allr[c] = rs
    # per-round sums over sizes (all rows, both placements) as a round-level view
    tot = {(t, r): sum(a + (b or 0) for a, b in d[(t, r)].values()) for t in TAGS for r in ROUNDS}
    print(f"\nSum of all {c} times per round (µs): " + "; ".join(
        f"r{r} main {tot[('main', r)]:.1f} / retire {tot[('retire', r)]:.1f}" for r in ROUNDS))
    med = {(t, r): st.median([v for s in sizes if s <= 32768 for v in d[(t, r)][s] if v is not None and s > 0])
           for t in TAGS for r in ROUNDS}
    print(f"Median over the 8 B–32 KiB cells (both placements) per round (µs): main "
          + " / ".join(f"{med[('main', r)]:.2f}" for r in ROUNDS) + "; retire "
          + " / ".join(f"{med[('retire', r)]:.2f}" for r in ROUNDS))
    print(f"Geometric mean of the per-cell ratios: {gmean(rs):.3f} ({len(rs)} cells; "
          f"{sum(r < 1 for r in rs)} below 1, {sum(r > 1 for r in rs)} above)\n")
print(f"All cells, all collectives: geometric mean ratio {gmean(sum(allr.values(), [])):.3f}\n")

print("## Spans run: FERROCX_SPANS=1, all_reduce 8 B, -n 20000 -w 1000 (one per round per binary)\n")
print("| round | binary | fxperf time oop / ip (µs) | rank | calls | core: device collective µs/call | ce: collective launch | ce: order | ce: retire calls | ce: retire µs/retire | retire µs per call (total/calls) | sdk: cuLaunchKernel |")
print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
agg = {t: {k: [] for k in ["dc", "order", "retper", "launch", "t"]} for t in TAGS}
for r in ROUNDS:
    for t in TAGS:
        p = f"{D}/r{r}-{t}-spans.log"
        tm = rows(p)[8]
        agg[t]["t"] += [tm[0], tm[1]]
        for rk, sp in sorted(spans(p).items(), key=lambda kv: str(kv[0])):
            calls = sp["core: device collective"][0]
            rc, rtot, rper = sp.get("ce: retire (in order)", (0, 0.0, 0.0))
            per_call = rtot / calls
            agg[t]["dc"].append(sp["core: device collective"][2])
            agg[t]["order"].append(sp["ce: order"][2])
            agg[t]["retper"].append(per_call)
            agg[t]["launch"].append(sp["sdk: cuLaunchKernel"][2])
            print(f"| {r} | {t} | {tm[0]:.2f} / {tm[1]:.2f} | {rk} | {calls} | {sp['core: device collective'][2]:.3f} | "
                  f"{sp['ce: collective launch'][2]:.3f} | {sp['ce: order'][2]:.3f} | {rc} | {rper:.2f} | {per_call:.3f} | "
                  f"{sp['sdk: cuLaunchKernel'][2]:.3f} |")
print()
print("| binary | fxperf time (6 values) | core: device collective µs/call | ce: order µs/call | ce: retire µs per call | sdk: cuLaunchKernel µs/call |")
print("| --- | --- | --- | --- | --- | --- |")
for t in TAGS:
    a = agg[t]
    f = lambda v: f"{fmt_rng(v)} (median {st.median(v):.2f})" if v is not a["retper"] else f"{min(v):.3f}–{max(v):.3f} (median {st.median(v):.3f})"
    print(f"| {t} | {f(a['t'])} | {f(a['dc'])} | {f(a['order'])} | {f(a['retper'])} | {f(a['launch'])} |")
