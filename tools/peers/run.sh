#!/usr/bin/env bash
# Measures the peers collie bench is compared with, on this machine, into
# DIR (default peers/): Open MPI over TCP (ob1 + tcp btl on loopback, no
# shared memory) and torch.distributed's gloo backend, float32 sum, for
# 2 and 4 ranks, RUNS times each (default 3), for COLLECTIVES (default
# all_reduce), sizes 8 B to 64 MiB by FACTOR (default 2). Needs the Debian packages
# openmpi-bin, libopenmpi-dev and python3-torch. See docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-peers}
runs=${RUNS:-3}
collectives=${COLLECTIVES:-all_reduce}
factor=${FACTOR:-2}
mkdir -p "$out"
mpicc -O2 -o "$out/mpi_bench" tools/peers/mpi_bench.c
for n in 2 4; do
  for c in $collectives; do
    for r in $(seq "$runs"); do
      mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include lo "$out/mpi_bench" "$c" 8 67108864 "$factor" 20 5 \
        > "$out/mpi-$c-$n-$r.csv"
      /usr/bin/python3 tools/peers/torch_gloo_bench.py --ranks "$n" --collective "$c" \
        -b 8 -e 64M -f "$factor" -n 20 -w 5 > "$out/torch-$c-$n-$r.csv" 2>/dev/null
    done
  done
done
