#!/usr/bin/env bash
# Sealed against clear across the hosts of an emulated cluster
# (tools/cluster.sh): collie bench with COLLIE_SEAL=on (the default between
# hosts) and COLLIE_SEAL=off, one after the other in each of ROUNDS rounds
# (default 3; on first in odd rounds, off first in even ones),
# for each COLLECTIVES (default: all_reduce all_gather
# broadcast), float32 sum, Auto, ranks numbered by host: 8 B to 64 KiB by 2
# (SMALL_ITERS calls, default 300) and 1 MiB to 16 MiB by 4 (ITERS, default
# 10; SMALL_ONLY=1 leaves these out). Files: DIR/SEAL-COLLECTIVE-ROUND.csv (collie bench --csv of rank 0;
# the time_us column is the mean with the maximum across ranks,
# rank0_median_us the median of rank 0's calls). HOSTS (4), PER_HOST (2),
# RATE (1gbit), HOST_LINK (COLLIE_HOST_LINK, default 1,50); LOOPBACK=1 for
# 2 ranks on loopback TCP instead (below). Compare with
#   python3 tools/peers/seal_compare.py DIR
# Needs root and iproute2.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-seal}
hosts=${HOSTS:-4} per=${PER_HOST:-2} rate=${RATE:-1gbit} rounds=${ROUNDS:-3}
small_iters=${SMALL_ITERS:-300} iters=${ITERS:-10} host_link=${HOST_LINK:-1,50}
collie=$PWD/build/release/bin/collie
mkdir -p "$dir"
if [ "${LOOPBACK:-0}" = 1 ]; then
  # LOOPBACK=1: 2 ranks of this host over loopback TCP instead, all_reduce
  # from 1 MiB to 64 MiB (ITERS calls), files DIR/SEAL-loopback-ROUND.csv.
  for ((round = 1; round <= rounds; ++round)); do
    for seal in on off; do
      echo "seal_bench: round $round, loopback, COLLIE_SEAL=$seal"
      COLLIE_TRANSPORT=tcp COLLIE_SEAL=$seal "$collie" bench all_reduce --ranks 2 -b 1M -e 64M \
        -n "$iters" -w 2 --csv --algo auto >"$dir/$seal-loopback-$round.csv"
    done
  done
  exit 0
fi
tools/cluster.sh up "$hosts" "$rate"
trap 'tools/cluster.sh down' EXIT

# on_each_rank SEAL OUT CMD...: runs CMD as every rank on its host (rank 0's
# standard output appended to OUT) and waits for all.
on_each_rank() {
  local seal=$1 out0=$2 n=$((hosts * per)) pids=() token
  shift 2
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ((h = 0; h < hosts; ++h)); do
    for ((l = 0; l < per; ++l)); do
      local r=$((h * per + l)) out=/dev/null
      [ $r = 0 ] && out=$out0
      tools/cluster.sh run $h env RANK=$r WORLD_SIZE=$n MASTER_ADDR="$(tools/cluster.sh addr 0)" \
        MASTER_PORT=29500 COLLIE_SOCKET_IFNAME=eth0 COLLIE_HOST_LINK="$host_link" \
        COLLIE_STORE_TOKEN="$token" COLLIE_SEAL="$seal" "$@" >>"$out" &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
}

for ((round = 1; round <= rounds; ++round)); do
  for collective in ${COLLECTIVES:-all_reduce all_gather broadcast}; do
    order="on off"
    ((round % 2 == 0)) && order="off on"  # ABBA: neither goes first every time
    for seal in $order; do
      echo "seal_bench: round $round, $collective, COLLIE_SEAL=$seal"
      out=$dir/$seal-$collective-$round.csv
      : >"$out"
      on_each_rank "$seal" "$out" "$collie" bench "$collective" -b 8 -e 64K -f 2 \
        -n "$small_iters" -w 20 --csv --algo auto
      [ "${SMALL_ONLY:-0}" = 1 ] && continue
      on_each_rank "$seal" "$out" "$collie" bench "$collective" -b 1M -e 16M -f 4 \
        -n "$iters" -w 2 --csv --algo auto
    done
  done
done
