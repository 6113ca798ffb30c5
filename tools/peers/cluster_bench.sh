#!/usr/bin/env bash
# collie and Open MPI across the hosts of an emulated cluster
# (tools/cluster.sh: network namespaces, each host's link shaped with tbf),
# by one method, interleaved, into DIR (default cluster/): for each of
# ROUNDS rounds (default 2), each placement (by host: ranks 0..L-1 on host
# 0; round robin: rank r on host r % H), each system in turn, all_reduce
# float32 sum from 8 B to MAXBYTES (default 16M) by FACTOR (default 8), the
# mean over ITERS (default 10) timed iterations after 2, the maximum across
# ranks:
#   collie  collie bench with every all_reduce algorithm and Auto, its ranks
#           started by hand on their hosts (env://, COLLIE_SOCKET_IFNAME=eth0,
#           COLLIE_HOST_LINK=$HOST_LINK: the link Auto assumes)
#   mpi     Open MPI over TCP (tools/peers/mpi_bench.c; the ob1 tcp btl,
#           mpirun's rsh agent entering each host's namespace, yielding when
#           idle as it must with more ranks than processors)
# Files: DIR/SYSTEM-PLACEMENT-ROUND.csv. HOSTS (4), PER_HOST (2), RATE (1gbit).
# Needs root, iproute2, openmpi-bin and libopenmpi-dev; compare with
#   python3 tools/peers/cluster_compare.py DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-cluster}
hosts=${HOSTS:-4} per=${PER_HOST:-2} rate=${RATE:-1gbit} rounds=${ROUNDS:-2}
max=${MAXBYTES:-16M} factor=${FACTOR:-8} iters=${ITERS:-10}
host_link=${HOST_LINK:-1,50}
collie=$PWD/build/release/bin/collie
mkdir -p "$dir" "$dir/tmp"
tools/cluster.sh up "$hosts" "$rate"
trap 'tools/cluster.sh down' EXIT
mpicc -O2 -o "$dir/tmp/mpi_bench" tools/peers/mpi_bench.c
for ((h = 0; h < hosts; ++h)); do
  grep -q "^$(tools/cluster.sh addr $h) h$h\$" /etc/hosts || echo "$(tools/cluster.sh addr $h) h$h" >>/etc/hosts
  echo "h$h slots=$per"
done >"$dir/tmp/hostfile"
printf '#!/bin/sh\nexec %s/tools/cluster.sh rsh "$@"\n' "$PWD" >"$dir/tmp/rsh"
chmod +x "$dir/tmp/rsh"
bytes() { numfmt --from=iec "$1"; }

run_collie() {  # placement, out
  local n=$((hosts * per)) pids=() token
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ((h = 0; h < hosts; ++h)); do
    for ((l = 0; l < per; ++l)); do
      local r=$((h * per + l)) out=/dev/null
      [ "$1" = rr ] && r=$((l * hosts + h))
      [ $r = 0 ] && out=$2
      tools/cluster.sh run $h env RANK=$r WORLD_SIZE=$n MASTER_ADDR="$(tools/cluster.sh addr 0)" \
        MASTER_PORT=29500 COLLIE_SOCKET_IFNAME=eth0 COLLIE_HOST_LINK="$host_link" \
        COLLIE_STORE_TOKEN="$token" COLLIE_LOG_LEVEL=warn "$collie" bench all_reduce -b 8 \
        -e "$max" -f "$factor" -n "$iters" -w 2 --csv \
        --algo auto,ring,halving_doubling,recursive_doubling,tree,two_level >"$out" &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
}

run_mpi() {  # placement, out
  local map=slot
  [ "$1" = rr ] && map=node
  mpirun --allow-run-as-root --oversubscribe -np $((hosts * per)) --hostfile "$dir/tmp/hostfile" \
    --map-by $map --mca plm_rsh_agent "$dir/tmp/rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include 10.78.0.0/24 \
    --mca oob_tcp_if_include 10.78.0.0/24 --mca mpi_yield_when_idle 1 \
    "$dir/tmp/mpi_bench" all_reduce 8 "$(bytes "$max")" "$factor" "$iters" 2 >"$2"
}

for ((round = 1; round <= rounds; ++round)); do
  for placement in host rr; do
    for system in ${SYSTEMS:-collie mpi}; do
      echo "cluster_bench: round $round, $placement, $system"
      "run_$system" $placement "$dir/$system-$placement-$round.csv"
    done
  done
done
