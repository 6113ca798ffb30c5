#!/usr/bin/python3
"""Medians of the runs in DIR (tools/peers/run.sh: SYSTEM-COLLECTIVE-RANKS-RUN.csv,
and iperf-RUN.{out,in}.json) side by side, as a Markdown table.

  tools/peers/compare.py DIR all_reduce 2
  tools/peers/compare.py --shm DIR all_reduce 2
  tools/peers/compare.py --torch DIR all_reduce 2

With --torch: torch.distributed with collie's backend (torchcollie, its
default transport; torchcollietcp, over TCP) against torch's gloo (torch),
by the same script.

With --shm: collie on shared memory (collieshm) against Open MPI's shared
memory (mpishm), Open MPI over TCP (mpi), the better of the two, and
collie over TCP (collie); ratios are the other's time over collie's.

Ratios are the peer's time over collie's (above 1: collie is faster; for
sizes of 64 KiB and more that is also collie's busbw over the peer's).
Every table gives both common methods: the mean of the calls with the
slowest rank's (time_us, as nccl-tests), then the median of rank 0's calls
timed one by one (rank0_median_us, as MPI's benchmarks), each the median
over the rounds; "-" where a CSV lacks the column (folders from before it).
"% TCP" is collie's busbw (the bytes each rank sends, per second, for
all_reduce) over what TCP lets a rank send on this host: what one stream
carries while another carries the same the other way (iperf3, the median
of the runs), times cores / ranks when the ranks outnumber the cores (each
byte sent costs a core its share of both copies through the kernel).
collie's figure is the in-place row, as the peers'.

Where the folder has them (run.sh's systems bare and bareexchange), a
second table gives the floor beside Open MPI: a pipelined ring in C with
no library (bare) and the same bytes with no reduce (bare exchange), with
Open MPI's time over each. That ratio is the most any TCP design could show
against Open MPI in the run: a bar above it is below what loopback TCP allows.

Launches run with the host out of its usual state (run.sh's cross-core
probe, DIR/host-NAME.txt, before or after the launch outside 0.6 to 1.6
times the median of the folder's probes) are left out and counted in the
first line, which counts rounds (one launch of each system, or several
with run.sh's SPLIT); --all keeps them. Folders from before the probe have
no such files: every launch counts.
"""
import collections, csv, glob, json, os, statistics, sys

shm = "--shm" in sys.argv
torch_mode = "--torch" in sys.argv
keep_all = "--all" in sys.argv
args = [a for a in sys.argv[1:] if a not in ("--shm", "--torch", "--all")]
folder, collective, ranks = args[0], args[1], args[2]

def name_of(path, prefix, suffix):
    """A file's name without `prefix` and `suffix`: the launch it is of."""
    return os.path.basename(path)[len(prefix):-len(suffix)]


probes = {}
for path in glob.glob(os.path.join(folder, "host-*.txt")):
    with open(path) as f:
        probes[name_of(path, "host-", ".txt")] = [float(x) for x in f.read().split()]
usual = statistics.median([v for pair in probes.values() for v in pair] or [0.0])


# The usual range: this much of the median of the folder's probes (run.sh's too).
BAND = (0.6 * usual, 1.6 * usual)


def unusual(name):
    """Whether the host's cross-core probe read out of its usual range (BAND)
    before or after launch NAME."""
    return not keep_all and any(not BAND[0] <= v <= BAND[1] for v in probes.get(name, []))


med, med0, rounds, left_out = {}, {}, {}, {}
for system in ("collie", "mpi", "torch", "collieshm", "mpishm", "torchcollie", "torchcollietcp",
               "bare", "bareexchange"):
    times, bws = collections.defaultdict(list), collections.defaultdict(list)
    times0 = collections.defaultdict(list)  # rank 0's median call, where the CSV has it
    paths = glob.glob(os.path.join(folder, f"{system}-{collective}-{ranks}-*.csv"))
    kept = [p for p in paths if not unusual(name_of(p, "", ".csv"))]
    # A round's sizes may come from several launches (run.sh's SPLIT):
    # SYSTEM-COLLECTIVE-RANKS-ROUND[.SIZE].csv.
    rounds[system] = len({name_of(p, "", ".csv").split(".")[0] for p in kept})
    left_out[system] = len(paths) - len(kept)
    paths = kept
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("placement", "in-place") != "in-place" and collective in ("all_reduce", "reduce", "broadcast"):
                    continue
                if row.get("algorithm", "auto") != "auto":
                    continue
                size = int(row["size_bytes"])
                times[size].append(float(row["time_us"]))
                if row.get("rank0_median_us"):
                    times0[size].append(float(row["rank0_median_us"]))
                bws[size].append(float(row["busbw_gbps"]))
    med[system] = {s: (statistics.median(times[s]), statistics.median(bws[s])) for s in times}
    med0[system] = {s: (statistics.median(times0[s]), 0.0) for s in times0}

def dropped_text(*systems):
    counts = [f"{s_} {left_out[s_]}" for s_ in systems if left_out[s_]]
    return (f" (launches left out, the host out of its usual state: {', '.join(counts)}; "
            f"cross-core probe outside {BAND[0]:.1f}-{BAND[1]:.1f} GB/s)") if counts else ""


def size_name(s_):
    return f"{s_ >> 20} MiB" if s_ >= 1 << 20 else f"{s_ >> 10} KiB" if s_ >= 1 << 10 else f"{s_} B"


def time_of(x):
    return "-" if not x else (f"{x[0]:.2f}" if x[0] < 100 else f"{x[0]:.0f}")


def ratio(a, b):
    """a's time over b's (a and b: (time, busbw) or None), as "1.23x"."""
    return f"{a[0] / b[0]:.2f}x" if a and b and b[0] > 0 else "-"


if torch_mode:
    print(f"rounds: torch+collie {rounds['torchcollie']}, torch+collie over TCP "
          f"{rounds['torchcollietcp']}, torch+gloo {rounds['torch']}"
          f"{dropped_text('torchcollie', 'torchcollietcp', 'torch')}")
    print()
    # Both methods: the mean of the calls with the slowest rank's, and the
    # median of rank 0's calls timed one by one ("-" where a CSV lacks it).
    print("| size | torch+collie (us) | torch+gloo (us) | gloo / collie | torch+collie over TCP (us) | gloo / collie TCP "
          "| rank 0's median: collie (us) | gloo (us) | gloo / collie | gloo / collie TCP |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s_ in sorted(set(med["torchcollie"]) | set(med["torch"])):
        c, g, ct = (med[k].get(s_) for k in ("torchcollie", "torch", "torchcollietcp"))
        c0, g0, ct0 = (med0[k].get(s_) for k in ("torchcollie", "torch", "torchcollietcp"))
        print(f"| {size_name(s_)} | {time_of(c)} | {time_of(g)} | {ratio(g, c)} | {time_of(ct)} | "
              f"{ratio(g, ct)} | {time_of(c0)} | {time_of(g0)} | {ratio(g0, c0)} | {ratio(g0, ct0)} |")
    sys.exit(0)

if shm:
    print(f"rounds: collie shm {rounds['collieshm']}, Open MPI shm {rounds['mpishm']}, "
          f"Open MPI tcp {rounds['mpi']}, collie tcp {rounds['collie']}"
          f"{dropped_text('collieshm', 'mpishm', 'mpi', 'collie')}")
    print()
    print("| size | collie shm time (us) | busbw (GB/s) | Open MPI shm (us) | vs | Open MPI tcp (us) | vs | vs the better | collie tcp (us) | vs "
          "| rank 0's median: collie shm (us) | Open MPI shm (us) | vs | vs the better |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s_ in sorted(set(med["collieshm"]) | set(med["mpishm"])):
        c, m, t, ct = (med[k].get(s_) for k in ("collieshm", "mpishm", "mpi", "collie"))
        c0, m0, t0 = (med0[k].get(s_) for k in ("collieshm", "mpishm", "mpi"))
        best = min((x for x in (m, t) if x), key=lambda x: x[0], default=None)
        best0 = min((x for x in (m0, t0) if x), key=lambda x: x[0], default=None)
        bw = f"{c[1]:.3f}" if c else "-"
        print(f"| {size_name(s_)} | {time_of(c)} | {bw} | {time_of(m)} | {ratio(m, c)} | "
              f"{time_of(t)} | {ratio(t, c)} | {ratio(best, c)} | {time_of(ct)} | {ratio(ct, c)} | "
              f"{time_of(c0)} | {time_of(m0)} | {ratio(m0, c0)} | {ratio(best0, c0)} |")
    sys.exit(0)

streams = []
for path in glob.glob(os.path.join(folder, "iperf-*.out.json")):
    if unusual(name_of(path, "", ".out.json")):
        continue
    try:
        pair = [json.load(open(p))["end"]["sum_received"]["bits_per_second"] / 8e9
                for p in (path, path.replace(".out.json", ".in.json"))]
        streams.append(sum(pair) / 2)
    except (OSError, KeyError, ValueError):
        pass
tcp = statistics.median(streams) if streams else None
cores = os.cpu_count() or 1
limit = tcp * min(1.0, cores / int(ranks)) if tcp else None

print(f"rounds: collie {rounds['collie']}, Open MPI {rounds['mpi']}, torch-gloo {rounds['torch']}"
      + dropped_text("collie", "mpi", "torch")
      + (f"; TCP: {tcp:.2f} GB/s per stream, two at once (iperf3, {len(streams)} runs); "
       f"limit per rank {limit:.2f} GB/s ({ranks} ranks, {cores} cores)" if tcp else ""))
print()
print("| size | collie time (us) | collie busbw (GB/s) | % TCP | Open MPI time (us) | vs Open MPI | torch-gloo time (us) | vs torch-gloo "
      "| rank 0's median: collie (us) | Open MPI (us) | vs Open MPI | torch-gloo (us) | vs torch-gloo |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
sizes = sorted(set(med["collie"]) | set(med["mpi"]) | set(med["torch"]))
for s in sizes:
    c, m, t = (med[k].get(s) for k in ("collie", "mpi", "torch"))
    c0, m0, t0 = (med0[k].get(s) for k in ("collie", "mpi", "torch"))
    pct = f"{100 * c[1] / limit:.0f}%" if c and limit else "-"
    bw = f"{c[1]:.3f}" if c else "-"
    print(f"| {size_name(s)} | {time_of(c)} | {bw} | {pct} | {time_of(m)} | {ratio(m, c)} | "
          f"{time_of(t)} | {ratio(t, c)} | {time_of(c0)} | {time_of(m0)} | {ratio(m0, c0)} | "
          f"{time_of(t0)} | {ratio(t0, c0)} |")

if med["bare"] or med["bareexchange"]:
    print()
    print(f"The floor (rounds: bare ring {rounds['bare']}, bare exchange {rounds['bareexchange']}"
          + dropped_text("bare", "bareexchange") + "):")
    print()
    print("| size | collie (us) | bare ring (us) | bare exchange (us) | Open MPI (us) | Open MPI / collie | Open MPI / bare ring | Open MPI / bare exchange |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted(set(med["bare"]) | set(med["bareexchange"])):
        c, b, e, m = (med[k].get(s) for k in ("collie", "bare", "bareexchange", "mpi"))
        print(f"| {size_name(s)} | {time_of(c)} | {time_of(b)} | {time_of(e)} | {time_of(m)} | "
              f"{ratio(m, c)} | {ratio(m, b)} | {ratio(m, e)} |")
