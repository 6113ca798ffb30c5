#!/usr/bin/env python3
"""Tables of tools/peers/cluster_bench.sh's results, for docs/PERFORMANCE.md.

    python3 tools/peers/cluster_compare.py DIR [--hosts 4] [--gbits 1]

For each placement (by host, round robin) and size: the link bound
(what each host must send and receive, whatever the algorithm: all_reduce
2 (H - 1) / H x size / rate; all_gather and reduce_scatter (H - 1) / H x
size / rate, size the gathered data; broadcast size / rate), collie's Auto (its pick) over the bound, the fastest of
collie's algorithms and Auto over it, its pick forced over the fastest
(the choice, apart from the noise between two timings of one schedule:
Auto and its pick forced run the same steps), and each peer's time over collie's
Auto (> 1: collie faster): Open MPI, torch's gloo, and torch on collie (the
collie backend: its overhead over collie's own Auto). Times are in-place
where collie bench has one (as mpi_bench's), else out of place, the median
over the rounds of each system's maximum-across-ranks mean.
"""
import argparse, csv, glob, os, statistics
from collections import defaultdict


def label(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def compared_placement(collective):
    """The figure of collie bench's compared: in place where the collective
    has it (all_reduce, broadcast: as mpi_bench's), else out of place."""
    return "in-place" if collective in ("all_reduce", "broadcast") else "out-of-place"


def ms(us):
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.0f} us"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--gbits", type=float, default=1.0)
    a = p.parse_args()
    collie = defaultdict(list)  # (placement, size, algo) -> [us]
    picks = defaultdict(set)
    peers = defaultdict(lambda: defaultdict(list))  # system -> (placement, size) -> [us]
    shares = {"all_reduce": 2 * (a.hosts - 1) / a.hosts, "all_gather": (a.hosts - 1) / a.hosts,
              "reduce_scatter": (a.hosts - 1) / a.hosts, "broadcast": 1}
    collective = None
    for path in glob.glob(os.path.join(a.dir, "*.csv")):
        system, placement, _ = os.path.basename(path)[:-4].split("-")
        with open(path) as f:
            rows = [r for r in csv.reader(f) if r and r[0] in shares]
        for r in rows:
            collective = r[0]
            if system == "collie":
                if r[9] != compared_placement(r[0]):
                    continue
                collie[(placement, int(r[4]), r[1])].append(float(r[10]))
                if r[1] == "auto":
                    picks[(placement, int(r[4]))].add(r[2])
            else:
                peers[system][(placement, int(r[1]))].append(float(r[2]))
    med = {k: statistics.median(v) for k, v in collie.items()}
    for placement, words in (("host", "by host"), ("rr", "round robin")):
        sizes = sorted({s for (pl, s, _) in med if pl == placement})
        if not sizes:
            continue
        print(f"\n{collective}, ranks numbered {words}\n")
        names = [(k, w) for k, w in (("mpi", "Open MPI"), ("gloo", "torch gloo"),
                                      ("torch", "torch on collie")) if k in peers]
        print("| size | bound | collie Auto | its pick | / bound | fastest algorithm "
              "| Auto / fastest | pick / fastest |" + "".join(f" {w} / Auto |" for _, w in names))
        print("|---:|---:|---:|---|---:|---|---:|---:|" + "---:|" * len(names))
        for s in sizes:
            bound = shares[collective] * s * 8 / (a.gbits * 1e9) * 1e6
            auto = med[(placement, s, "auto")]
            algos = {al: t for (pl, sz, al), t in med.items() if pl == placement and sz == s
                     and al != "auto"}
            best = min(algos, key=algos.get)
            # Below 10 us the bound says nothing: a call's latency is the time.
            shown = bound >= 10
            pick = picks[(placement, s)]
            # Auto picks by size and group alone: one pick a size, timed forced too.
            chosen = algos.get(next(iter(pick))) if len(pick) == 1 else None
            row = (f"| {label(s)} | {ms(bound) if shown else '-'} | {ms(auto)} | "
                   f"{'/'.join(sorted(pick))} | "
                   f"{f'{auto / bound:.2f}' if shown else '-'} | "
                   f"{best} {ms(algos[best])} | {auto / algos[best]:.2f} | "
                   f"{f'{chosen / algos[best]:.2f}' if chosen else '-'} |")
            for k, _ in names:
                v = peers[k].get((placement, s))
                row += f" {statistics.median(v) / auto:.2f} |" if v else " - |"
            print(row)

if __name__ == "__main__":
    main()
