#!/usr/bin/env bash
# Measures collie and the peers it is compared with on this machine, by one
# method, interleaved, into DIR (default peers/): for each of RUNS rounds
# (default 3), for 2 and 4 ranks (RANKS), for each of COLLECTIVES (default
# all_reduce), sizes 8 B to MAXBYTES (default 64M) by FACTOR (default 2),
# float32 sum, 20 timed iterations after 5 warm-up, each system in turn:
#   collie     collie bench over TCP (COLLIE_TRANSPORT=tcp; COLLIE: the binary,
#              default build/release/bin/collie)
#   mpi        Open MPI over TCP (ob1 + the tcp btl on loopback: no shared memory)
#   torch      torch.distributed's gloo backend (Debian's python3-torch)
#   torchcollie  torch.distributed with collie's backend (runtime/torch, from
#              build/release/python), by the same script; its default transport
#              (shared memory on one host), or TCP with COLLIE_TRANSPORT=tcp set
#   torchcollietcp  the same over TCP (COLLIE_TRANSPORT=tcp)
#   collieshm  collie bench with its default transport: shared memory on one host
#   mpishm     Open MPI with its defaults on one host (shared memory: vader + CMA)
#   bare       the floor, no library: tools/peers/bare_ring.c's pipelined ring
#              (a connection each way, SO_SNDBUF as collie's, spinning, each
#              rank bound to a processor, 200 iterations after 20: a floor is
#              taken at its best); what a ring over loopback TCP takes
#   bareexchange  the same bytes with no reduce and no dependency between
#              steps: what any all_reduce of that size must at least move
#              (both only for the sizes from SPLIT up, each a launch of its
#              own, and only where the ranks have a core each)
# SYSTEMS picks some (default "collie mpi torch"; for shared memory,
# SYSTEMS="collieshm mpishm mpi collie" and compare.py --shm). Sizes below
# SPLIT (default 1M) are one launch of each system, a sweep; each size from
# SPLIT up is a launch of its own (SPLIT=0: one sweep for all sizes), so
# that a launch is short next to the host's slow periods (below). Files:
# DIR/SYSTEM-COLLECTIVE-RANKS-ROUND[.SIZE].csv. Each round also measures
# the TCP limit of this host: two iperf3 streams at once, one each way
# (iperf-ROUND.json), which compare.py reads. Every system times the same
# two ways: the mean over the iterations on each rank, the maximum across
# ranks (time_us), and the median of rank 0's calls, each timed by itself
# (rank0_median_us; bare and bareexchange give the first alone).
# HOGS=N (default 0) measures a busy host: N processes spinning
# (`while :; do :; done`) for the whole run, started after the reference
# probes below, so that runnable processes outnumber the cores (6 on this
# project's 2-core machine); use it with SETTLE=0, as the probes read the
# hogs too.
# MPI_YIELD=1 runs Open MPI with `--mca mpi_yield_when_idle 1` (its setting
# for more ranks than cores: waits yield the processor).
# Needs the Debian packages openmpi-bin, libopenmpi-dev, python3-torch and
# iperf3. See docs/PERFORMANCE.md; tools/peers/compare.py makes the tables.
#
# Around every launch (and every iperf3 pair) the host's cross-core bandwidth
# is probed (tools/peers/crosscore.c: the speed of a copy from one processor
# to another through their caches) and written to DIR/host-NAME.txt, the
# probe before and the probe after. On a virtual machine that figure can drop
# 4x for seconds to a minute while the hypervisor has the processors apart,
# which slows every byte loopback TCP carries (and, more rarely, rise 3x).
# With SETTLE=1 (the default) each launch first waits, at most SETTLE_MAX
# seconds (default 180), until the probe reads 0.6 to 1.6 times the median
# of the run's probes (the first 20 s are ten probes for it); compare.py
# leaves out the launches that began or ended outside that (--all keeps
# them). Each launch may take LAUNCH_LIMIT seconds (default 900); one that
# fails or runs over stops the run, naming it.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-peers}
runs=${RUNS:-3}
collectives=${COLLECTIVES:-all_reduce}
factor=${FACTOR:-2}
maxbytes=${MAXBYTES:-64M}
ranks=${RANKS:-2 4}
systems=${SYSTEMS:-collie mpi torch}
collie=${COLLIE:-build/release/bin/collie}
max=$(numfmt --from=iec "$maxbytes")
mkdir -p "$out"
has() { [[ " $systems " == *" $1 "* ]]; }
if has mpi || has mpishm; then mpicc -O2 -o "$out/mpi_bench" tools/peers/mpi_bench.c; fi
cc -O2 -pthread -o "$out/crosscore" tools/peers/crosscore.c
if has bare || has bareexchange; then cc -O3 -march=native -o "$out/bare_ring" tools/peers/bare_ring.c; fi
settle=${SETTLE:-1}
settle_max=${SETTLE_MAX:-180}
launch_limit=${LAUNCH_LIMIT:-900}
limited=(timeout -k 10 "$launch_limit")
mpi_yield=()
if [ "${MPI_YIELD:-0}" = 1 ]; then mpi_yield=(--mca mpi_yield_when_idle 1); fi
# run.sh's own messages, whatever a launch's standard error is sent to.
exec 3>&2

# probe: the cross-core bandwidth now, in $probed; $usual is the median of
# every probe so far (the host's usual state: it spends most of its time
# there, and the median ignores both the slow periods and the rarer fast
# ones, where this machine reads 3x its usual figure).
probes=()
probe() {
  probed=$("$out/crosscore") || {
    echo "run.sh: the cross-core probe ($out/crosscore) failed" >&3
    exit 1
  }
  probes+=("$probed")
  usual=$(printf '%s\n' "${probes[@]}" | sort -g | awk '{ v[NR] = $1 }
    END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
}
in_usual_state() {
  awk -v v="$1" -v u="$usual" 'BEGIN { exit !(v >= 0.6 * u && v <= 1.6 * u) }'
}
# around NAME COMMAND...: runs COMMAND between two probes (after waiting for
# the usual state when SETTLE=1) and writes both to DIR/host-NAME.txt. A
# command that fails stops the run, naming it.
around() {
  local name=$1 before end=$((SECONDS + settle_max)) rc=0
  shift
  probe
  while [ "$settle" = 1 ] && ! in_usual_state "$probed"; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "run.sh: the host is still out of its usual state after ${settle_max} s" \
        "(cross-core probe $probed GB/s, usual $usual): launching $name anyway;" \
        "compare.py will leave it out" >&3
      break
    fi
    sleep 2
    probe
  done
  before=$probed
  "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    if [ "$rc" = 124 ]; then
      echo "run.sh: $name did not finish within ${launch_limit} s (LAUNCH_LIMIT)" >&3
    else
      echo "run.sh: $name failed (exit status $rc); what it wrote is in $out" >&3
    fi
    exit "$rc"
  fi
  probe
  echo "$before $probed" > "$out/host-$name.txt"
}
# The first reference: ten probes over 20 s.
for _ in $(seq 10); do
  probe
  sleep 2
done

hogs=()
stop_hogs() { if [ ${#hogs[@]} -gt 0 ]; then kill "${hogs[@]}" 2> /dev/null || true; fi; }
trap stop_hogs EXIT
for _ in $(seq "${HOGS:-0}"); do
  (while :; do :; done) &
  hogs+=($!)
done

# Two iperf3 streams at once, one each way, as an all_reduce moves bytes
# both ways: each carries what one rank can send while it also receives.
iperf_pair() {
  local port=$((20000 + RANDOM % 20000))
  iperf3 -s -1 -p "$port" > /dev/null 2>&1 &
  iperf3 -s -1 -p $((port + 1)) > /dev/null 2>&1 &
  for _ in $(seq 50); do
    if ss -ltn | grep -q ":$((port + 1)) "; then break; fi
    sleep 0.1
  done
  iperf3 -c 127.0.0.1 -p "$port" -t 3 -J > "$1.out.json" &
  iperf3 -c 127.0.0.1 -p $((port + 1)) -t 3 -R -J > "$1.in.json"
  wait
}

# launch SYSTEM NAME MIN MAX: one launch of SYSTEM over sizes MIN to MAX,
# between two probes, into DIR/NAME.csv.
launch() {
  local system=$1 name=$2 min=$3 top=$4 csv="$out/$2.csv"
  case $system in
    collie | collieshm)
      local transport=tcp
      if [ "$system" = collieshm ]; then transport=shm; fi
      around "$name" "${limited[@]}" env COLLIE_TRANSPORT=$transport "$collie" bench "$c" \
        --ranks "$n" -b "$min" -e "$top" -f "$factor" -n 20 -w 5 --csv > "$csv"
      ;;
    mpishm)
      around "$name" "${limited[@]}" mpirun --allow-run-as-root --oversubscribe "${mpi_yield[@]}" \
        -np "$n" "$out/mpi_bench" "$c" "$min" "$top" "$factor" 20 5 > "$csv"
      ;;
    mpi)
      around "$name" "${limited[@]}" mpirun --allow-run-as-root --oversubscribe "${mpi_yield[@]}" \
        -np "$n" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$out/mpi_bench" "$c" "$min" "$top" "$factor" 20 5 > "$csv"
      ;;
    bare | bareexchange)
      local mode=ring
      if [ "$system" = bareexchange ]; then mode=exchange; fi
      around "$name" "${limited[@]}" env SPIN=1 PIN=1 SNDBUF=393216 "$out/bare_ring" "$mode" "$n" \
        "$min" "$top" "$factor" 200 20 > "$csv"
      ;;
    torch)
      around "$name" "${limited[@]}" /usr/bin/python3 tools/peers/torch_gloo_bench.py \
        --ranks "$n" --collective "$c" -b "$min" -e "$top" -f "$factor" -n 20 -w 5 \
        > "$csv" 2> /dev/null
      ;;
    torchcollie | torchcollietcp)
      local transport=()
      if [ "$system" = torchcollietcp ]; then transport=(COLLIE_TRANSPORT=tcp); fi
      around "$name" "${limited[@]}" env "${transport[@]}" PYTHONPATH=build/release/python \
        /usr/bin/python3 tools/peers/torch_gloo_bench.py --backend collie --ranks "$n" \
        --collective "$c" -b "$min" -e "$top" -f "$factor" -n 20 -w 5 > "$csv" 2> /dev/null
      ;;
  esac
}

split=$(numfmt --from=iec "${SPLIT:-1M}")
processors=$(nproc)
for r in $(seq "$runs"); do
  if command -v iperf3 > /dev/null; then around "iperf-$r" iperf_pair "$out/iperf-$r"; fi
  for n in $ranks; do
    for c in $collectives; do
      # The pieces: MIN:MAX:SUFFIX, the sweep below SPLIT and each size above.
      pieces=()
      if [ "$split" -le 8 ] || [ "$split" -gt "$max" ]; then
        pieces+=("8:$max:")
      else
        below=8
        while [ $((below * factor)) -lt "$split" ]; do below=$((below * factor)); done
        pieces+=("8:$below:")
        for ((size = below * factor; size <= max; size *= factor)); do
          pieces+=("$size:$size:.$size")
        done
      fi
      for piece in "${pieces[@]}"; do
        IFS=: read -r min top suffix <<< "$piece"
        for system in $systems; do
          # The floor is for the sizes that have launches of their own, and
          # ranks with a core each (more, and bare_ring's poll() loop is no floor).
          if [[ $system == bare* ]] && { [[ -z $suffix && ${#pieces[@]} -gt 1 ]] ||
            [ "$n" -gt "$processors" ]; }; then continue; fi
          launch "$system" "$system-$c-$n-$r$suffix" "$min" "$top"
        done
      done
    done
  done
done
