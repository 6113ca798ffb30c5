#!/usr/bin/env python3
"""The table of tools/peers/seal_bench.sh's results, for docs/PERFORMANCE.md.

    python3 tools/peers/seal_compare.py DIR [--hosts 4] [--gbits 1]

For each collective and size: sealed (COLLIE_SEAL=on, the default between
hosts) over clear (off) by both methods, the median over the rounds of
(1) rank 0's median call and (2) the mean with the maximum across ranks,
and from 1 MiB the sealed mean over the link bound (all_reduce
2 (H - 1) / H x size / rate, all_gather (H - 1) / H x size, broadcast
size / rate; loopback: 2 ranks' all_reduce, no link). Times are in place where the collective has it (all_reduce,
broadcast), else out of place.
"""
import argparse, csv, glob, os, statistics
from collections import defaultdict

from cluster_compare import label, ms  # the same units as the cluster tables


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--gbits", type=float, default=1.0)
    a = p.parse_args()
    # (collective, size, seal) -> lists of (median, mean-max), one per round
    runs = defaultdict(list)
    for path in glob.glob(os.path.join(a.dir, "*.csv")):
        seal, name, _ = os.path.basename(path)[:-4].split("-")
        collective = "all_reduce" if name == "loopback" else name
        placement = "in-place" if collective in ("all_reduce", "broadcast") else "out-of-place"
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("collective") != collective or row["placement"] != placement:
                    continue
                if row["wrong"] != "0":
                    raise SystemExit(f"{path}: wrong results at {row['size_bytes']} B")
                runs[(name, int(row["size_bytes"]), seal)].append(
                    (float(row["rank0_median_us"]), float(row["time_us"])))
    h = a.hosts
    share = {"all_reduce": 2 * (h - 1) / h, "all_gather": (h - 1) / h, "broadcast": 1.0}
    print("| collective | size | sealed, rank 0's median | clear | sealed / clear | "
          "sealed, mean (max over ranks) | clear | sealed / clear | sealed / link bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for collective in ("all_reduce", "all_gather", "broadcast", "loopback"):
        sizes = sorted({s for (c, s, _) in runs if c == collective})
        for size in sizes:
            on, off = runs.get((collective, size, "on")), runs.get((collective, size, "off"))
            if not on or not off:
                continue
            med = [statistics.median(x[i] for x in on) for i in (0, 1)]
            clr = [statistics.median(x[i] for x in off) for i in (0, 1)]
            bound = ""
            if size >= 1 << 20 and collective != "loopback":
                us = share[collective] * size * 8 / (a.gbits * 1e9) * 1e6
                bound = f"{med[1] / us:.2f}"
            print(f"| {collective} | {label(size)} | {ms(med[0])} | {ms(clr[0])} | "
                  f"{med[0] / clr[0]:.2f} | {ms(med[1])} | {ms(clr[1])} | {med[1] / clr[1]:.2f} | {bound} |")


if __name__ == "__main__":
    main()
