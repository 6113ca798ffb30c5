#!/usr/bin/env python3
"""The cost model's time beside the measured one, for every algorithm and
size of a tools/peers/cluster_bench.sh run, for docs/PERFORMANCE.md.

    python3 tools/peers/cluster_model.py DIR --gbits 0.957 --latency-us 6 \
        [--hosts 4] [--per-host 2] [--cores 2] [--from 1M] [--collie build/release/bin/collie]

For each placement, size (from --from) and algorithm of collie's CSVs in
DIR: the median measured time (in place where the collective has it, as
cluster_compare.py reads them) and what `collie explain --compare` says
for the same group, with the link the ranks measured at init (bench's hosts
line) and the cores the emulation shares; then model / measured. Auto
prices by this model, so where the two differ by much it picks wrongly:
the last table gives, for each size, Auto's pick on this model (explain's)
and its measured time over the fastest algorithm's.
"""
import argparse, csv, glob, json, os, statistics, subprocess
from collections import defaultdict

# (this directory is on the path: run as a script)
from cluster_compare import compared_placement, label


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def ms(seconds):
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--gbits", type=float, required=True)
    p.add_argument("--latency-us", type=float, required=True)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--burst-kib", type=float, default=0)
    p.add_argument("--from", dest="smallest", type=parse_size, default=1 << 20)
    p.add_argument("--collie", default="build/release/bin/collie")
    a = p.parse_args()
    measured = defaultdict(list)  # (collective, placement, size, algo) -> [seconds]
    for path in glob.glob(os.path.join(a.dir, "collie-*.csv")):
        placement = os.path.basename(path).split("-")[1]
        with open(path) as f:
            for r in csv.reader(f):
                if not r or r[0] == "collective" or r[1] == "auto":
                    continue
                if r[9] != compared_placement(r[0]):
                    continue
                if int(r[4]) >= a.smallest:
                    measured[(r[0], placement, int(r[4]), r[1])].append(float(r[10]) * 1e-6)
    model = {}
    picks = {}
    n = a.hosts * a.per_host
    for c, placement, size in sorted({k[:3] for k in measured}):
        blocked = c in ("all_gather", "reduce_scatter")
        count = size // 4 // (n if blocked else 1)
        out = subprocess.run(
            [a.collie, "explain", c, "--hosts", str(a.hosts), "--ranks-per-host", str(a.per_host),
             "--placement", "by-host" if placement == "host" else "round-robin",
             "--host-gbits", str(a.gbits), "--host-latency-us", str(a.latency_us),
             "--host-burst-kib", str(a.burst_kib), "--cores", str(a.cores), "--compare", "--count", str(count), "--format", "json"],
            check=True, capture_output=True, text=True).stdout
        doc = json.loads(out)
        picks[(c, placement, size)] = doc["auto"]
        for row in doc["compare"]:
            model[(c, placement, size, row["algorithm"])] = row["seconds"]
    print("| collective | placement | size | algorithm | measured | model | model / measured |")
    print("|---|---|---:|---|---:|---:|---:|")
    for key in sorted(measured):
        c, placement, size, algo = key
        t = statistics.median(measured[key])
        m = model.get(key)
        words = "by host" if placement == "host" else "round robin"
        print(f"| {c} | {words} | {label(size)} | {algo} | {ms(t)} | "
              f"{ms(m) if m else '-'} | {f'{m / t:.2f}' if m else '-'} |")
    print("\n| collective | placement | size | Auto's pick on the model | measured / fastest |")
    print("|---|---|---:|---|---:|")
    for (c, placement, size), pick in sorted(picks.items()):
        times = {al: statistics.median(v) for (c2, p2, s2, al), v in measured.items()
                 if (c2, p2, s2) == (c, placement, size)}
        words = "by host" if placement == "host" else "round robin"
        ratio = times[pick] / min(times.values()) if pick in times else None
        print(f"| {c} | {words} | {label(size)} | {pick} | "
              f"{f'{ratio:.2f}' if ratio else '-'} |")


if __name__ == "__main__":
    main()
