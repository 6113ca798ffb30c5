#!/usr/bin/python3
"""Medians of the runs in DIR (tools/peers/run.sh and collie bench --csv
files named collie-COLLECTIVE-RANKS-RUN.csv) side by side, with collie's
ratio to the best peer. collie's figure is the in-place row, as the peers'.

  tools/peers/compare.py DIR all_reduce 2
"""
import collections, csv, glob, os, statistics, sys

folder, collective, ranks = sys.argv[1], sys.argv[2], sys.argv[3]
med = {}
for system in ("collie", "mpi", "torch"):
    times, bws = collections.defaultdict(list), collections.defaultdict(list)
    for path in glob.glob(os.path.join(folder, f"{system}-{collective}-{ranks}-*.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("placement", "in-place") != "in-place" and collective in ("all_reduce", "reduce", "broadcast"):
                    continue
                size = int(row["size_bytes"])
                times[size].append(float(row["time_us"]))
                bws[size].append(float(row["busbw_gbps"]))
    med[system] = {s: (statistics.median(times[s]), statistics.median(bws[s]), len(bws[s])) for s in times}
sizes = sorted(set(med["collie"]) | set(med["mpi"]) | set(med["torch"]))
print(f"| size | collie time (us) | collie busbw | Open MPI busbw | torch-gloo busbw | collie / best |")
print("|---:|---:|---:|---:|---:|---:|")
for s in sizes:
    c = med["collie"].get(s)
    m = med["mpi"].get(s)
    t = med["torch"].get(s)
    cell = lambda x, i: f"{x[i]:.3f}" if x else "-"
    best = max([x[1] for x in (m, t) if x] or [0])
    if s < 65536:  # small: compare times (lower is better)
        bt = min([x[0] for x in (m, t) if x] or [0])
        ratio = f"time {c[0] / bt:.2f}x" if c and bt else "-"
        print(f"| {s} | {c[0]:.2f} | {cell(c,1)} | {cell(m,1)} ({m[0]:.1f} us) | {cell(t,1)} ({t[0]:.1f} us) | {ratio} |" if c and m and t else f"| {s} | - | - | - | - | - |")
    else:
        ratio = f"{c[1] / best:.2f}x" if c and best else "-"
        print(f"| {s} | {c[0]:.1f} | {cell(c,1)} | {cell(m,1)} | {cell(t,1)} | {ratio} |" if c else f"| {s} | - | - | {cell(m,1)} | {cell(t,1)} | - |")
