#!/usr/bin/env bash
# collie and Open MPI across the hosts of an emulated cluster
# (tools/cluster.sh: network namespaces, each host's link shaped with tbf),
# by one method, interleaved, into DIR (default cluster/): for each of
# ROUNDS rounds (default 2), each placement (by host: ranks 0..L-1 on host
# 0; round robin: rank r on host r % H), each system in turn, COLLECTIVE
# (default all_reduce; all_gather, reduce_scatter, broadcast too)
# float32 sum from 8 B to 16M by FACTOR (default 8) and at MAXBYTES
# (default 64M; LAST_ITERS, default 5), the mean over timed iterations
# after 2 (SMALL_ITERS, default 100, up to SPLIT, default 256K: 10 calls
# of 256 KiB are 35 ms of a crowded VM, and one slow call moved their mean
# by 20-50%; ITERS, default 10, above; the others after as many calls as
# collie's in-place figure: 2 + ITERS + 1 + 2), the maximum across ranks:
#   collie  collie bench with every algorithm of the collective and Auto
#           (all_reduce at MAXBYTES: Auto, the ring and two_level; the
#           others take 2-5x as long at 16M), its ranks
#           started by hand on their hosts (env://, COLLIE_SOCKET_IFNAME=eth0,
#           COLLIE_HOST_LINK=$HOST_LINK: the link Auto assumes)
#   mpi     Open MPI over TCP (tools/peers/mpi_bench.c; the ob1 tcp btl,
#           mpirun's rsh agent entering each host's namespace, yielding when
#           idle as it must with more ranks than processors)
#   gloo    torch.distributed's gloo (tools/peers/torch_gloo_bench.py --env,
#           /usr/bin/python3's torch, GLOO_SOCKET_IFNAME=eth0)
#   torch   torch.distributed with backend "collie" (the same script,
#           build/release/python on PYTHONPATH): collie under torch
# Files: DIR/SYSTEM-PLACEMENT-ROUND.csv. HOSTS (4), PER_HOST (2), RATE (1gbit),
# CC (the hosts' TCP congestion control: cubic, tools/cluster.sh).
# SYSTEMS picks some (default: collie mpi gloo torch).
# Needs root, iproute2, openmpi-bin and libopenmpi-dev, python3-torch; compare with
#   python3 tools/peers/cluster_compare.py DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-cluster}
hosts=${HOSTS:-4} per=${PER_HOST:-2} rate=${RATE:-1gbit} rounds=${ROUNDS:-2}
max=${MAXBYTES:-64M} factor=${FACTOR:-8} iters=${ITERS:-10} last_iters=${LAST_ITERS:-5}
sweep_top=$((16 << 20))  # the sweep by FACTOR ends here; MAXBYTES above it is one more point
split=${SPLIT:-256K} small_iters=${SMALL_ITERS:-100}
collective=${COLLECTIVE:-all_reduce}
# HOST_LINK: COLLIE_HOST_LINK for collie's ranks; unset, they measure the link.
host_link=${HOST_LINK:-}
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

# Runs "$@" on every rank's host, as rank r of the job (rank 0's standard
# output appended to OUT), and waits for all: on_each_rank PLACEMENT OUT
# [VAR=VALUE...] CMD... (env's words).
on_each_rank() {
  local placement=$1 out0=$2 n=$((hosts * per)) pids=() token
  shift 2
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ((h = 0; h < hosts; ++h)); do
    for ((l = 0; l < per; ++l)); do
      local r=$((h * per + l)) out=/dev/null
      [ "$placement" = rr ] && r=$((l * hosts + h))
      [ $r = 0 ] && out=$out0
      tools/cluster.sh run $h env RANK=$r WORLD_SIZE=$n MASTER_ADDR="$(tools/cluster.sh addr 0)" \
        COLLIE_SOCKET_IFNAME=eth0 ${host_link:+COLLIE_HOST_LINK="$host_link"} COLLIE_STORE_TOKEN="$token" \
        COLLIE_LOG_LEVEL=warn "$@" >>"$out" &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
}

# Each run_SYSTEM PLACEMENT OUT FROM TO ITERS WARM appends one sweep to OUT.
# Every system's timed calls come after as many calls at the size: collie
# bench times each algorithm out of place (WARM + ITERS + 1 to check)
# before in place, the figure compared, so the others warm up with as many
# (the first calls on fresh connections are slower: 256 KiB took collie 5
# ms out of place, 3.3 in place, and torch 5.3-10.7 ms after 2 warm-ups).
# The calls before collie's in-place figure: peer_warm ITERS WARM.
peer_warm() { echo $(($2 + $1 + 1 + $2)); }

run_collie() {
  local algos
  case $collective in
    all_reduce) algos=auto,ring,halving_doubling,recursive_doubling,tree,two_level
      (($(bytes "$3") > sweep_top)) && algos=auto,ring,two_level ;;
    all_gather) algos=auto,ring,recursive_doubling,two_level ;;
    reduce_scatter) algos=auto,ring,recursive_halving,two_level ;;
    broadcast) algos=auto,ring,tree,two_level ;;
    *) echo "cluster_bench: COLLECTIVE=$collective is not one it runs" >&2; exit 2 ;;
  esac
  on_each_rank "$1" "$2" MASTER_PORT=29500 "$collie" bench "$collective" -b "$3" -e "$4" \
    -f "$factor" -n "$5" -w "$6" --csv --algo $algos
}

run_torch_script() {  # backend, then as run_collie
  on_each_rank "$2" "$3" MASTER_PORT=29501 GLOO_SOCKET_IFNAME=eth0 \
    PYTHONPATH="$PWD/build/release/python" OMP_NUM_THREADS=1 \
    /usr/bin/python3 tools/peers/torch_gloo_bench.py --env --backend "$1" \
    --collective "$collective" -b "$4" -e "$5" \
    -f "$factor" -n "$6" -w "$(peer_warm "$6" "$7")"
}
run_gloo() { run_torch_script gloo "$@"; }
run_torch() { run_torch_script collie "$@"; }

run_mpi() {
  local map=slot
  [ "$1" = rr ] && map=node
  # (Open MPI 4.1 hung once at start-up here, every orted up, no rank
  # started: the sweep is then left out, and said so.)
  timeout "${MPI_TIMEOUT:-600}" \
  mpirun --allow-run-as-root --oversubscribe -np $((hosts * per)) --hostfile "$dir/tmp/hostfile" \
    --map-by $map --mca plm_rsh_agent "$dir/tmp/rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include 10.78.0.0/24 \
    --mca oob_tcp_if_include 10.78.0.0/24 --mca mpi_yield_when_idle 1 \
    "$dir/tmp/mpi_bench" "$collective" "$(bytes "$3")" "$(bytes "$4")" "$factor" "$5" \
    "$(peer_warm "$5" "$6")" >>"$2" ||
    echo "cluster_bench: mpirun failed or timed out (exit $?): sweep $3 to $4 left out" >&2
}

max_bytes=$(bytes "$max") large=$(($(bytes "$split") * factor))
top=$((max_bytes < sweep_top ? max_bytes : sweep_top))
for ((round = 1; round <= rounds; ++round)); do
  for placement in host rr; do
    for system in ${SYSTEMS:-collie mpi gloo torch}; do
      echo "cluster_bench: round $round, $placement, $system"
      out=$dir/$system-$placement-$round.csv
      : >"$out"
      "run_$system" $placement "$out" 8 "$split" "$small_iters" 2
      if ((large <= top)); then
        "run_$system" $placement "$out" "$large" "$top" "$iters" 2
      fi
      if ((max_bytes > top)); then
        "run_$system" $placement "$out" "$max_bytes" "$max_bytes" "$last_iters" 2
      fi
    done
  done
done
