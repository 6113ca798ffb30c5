#!/usr/bin/env bash
# Measures collie and the peers it is compared with on this machine, by one
# method, interleaved, into DIR (default peers/): for each of RUNS launches
# (default 3), for 2 and 4 ranks (RANKS), for each of COLLECTIVES (default
# all_reduce), one sweep of each system in turn, sizes 8 B to MAXBYTES
# (default 64M) by FACTOR (default 2), float32 sum, 20 timed iterations
# after 5 warm-up:
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
# SYSTEMS picks some (default "collie mpi torch"; for shared memory,
# SYSTEMS="collieshm mpishm mpi collie" and compare.py --shm). Each run also measures
# the TCP limit of this host: two iperf3 streams at once, one each way
# (iperf-RUN.json), which compare.py reads. Every system times the same way:
# the mean over the iterations on each rank, the maximum across ranks.
# Needs the Debian packages openmpi-bin, libopenmpi-dev, python3-torch and
# iperf3. See docs/PERFORMANCE.md; tools/peers/compare.py makes the tables.
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

for r in $(seq "$runs"); do
  if command -v iperf3 > /dev/null; then iperf_pair "$out/iperf-$r"; fi
  for n in $ranks; do
    for c in $collectives; do
      if has collie; then
        COLLIE_TRANSPORT=tcp "$collie" bench "$c" --ranks "$n" -b 8 -e "$maxbytes" -f "$factor" \
          -n 20 -w 5 --csv > "$out/collie-$c-$n-$r.csv"
      fi
      if has collieshm; then
        COLLIE_TRANSPORT=shm "$collie" bench "$c" --ranks "$n" -b 8 -e "$maxbytes" -f "$factor" \
          -n 20 -w 5 --csv > "$out/collieshm-$c-$n-$r.csv"
      fi
      if has mpishm; then
        mpirun --allow-run-as-root --oversubscribe -np "$n" "$out/mpi_bench" "$c" 8 "$max" \
          "$factor" 20 5 > "$out/mpishm-$c-$n-$r.csv"
      fi
      if has mpi; then
        mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl tcp,self \
          --mca btl_tcp_if_include lo "$out/mpi_bench" "$c" 8 "$max" "$factor" 20 5 \
          > "$out/mpi-$c-$n-$r.csv"
      fi
      if has torch; then
        /usr/bin/python3 tools/peers/torch_gloo_bench.py --ranks "$n" --collective "$c" \
          -b 8 -e "$maxbytes" -f "$factor" -n 20 -w 5 > "$out/torch-$c-$n-$r.csv" 2> /dev/null
      fi
      if has torchcollie; then
        PYTHONPATH=build/release/python /usr/bin/python3 tools/peers/torch_gloo_bench.py \
          --backend collie --ranks "$n" --collective "$c" -b 8 -e "$maxbytes" -f "$factor" \
          -n 20 -w 5 > "$out/torchcollie-$c-$n-$r.csv" 2> /dev/null
      fi
      if has torchcollietcp; then
        COLLIE_TRANSPORT=tcp PYTHONPATH=build/release/python /usr/bin/python3 \
          tools/peers/torch_gloo_bench.py --backend collie --ranks "$n" --collective "$c" \
          -b 8 -e "$maxbytes" -f "$factor" -n 20 -w 5 > "$out/torchcollietcp-$c-$n-$r.csv" \
          2> /dev/null
      fi
    done
  done
done
