#!/usr/bin/env bash
# What the wire between two hosts holds: tcpdump -w on host 1's link
# (tools/cluster.sh, 2 hosts x 1 rank) while collie bench runs one 16 MiB
# all_reduce (collie bench's checked data: the same bytes every run), once
# clear (COLLIE_SEAL=off) and once with the default (auto: sealed between
# hosts); then tools/peers/seal_capture.py looks for 48-byte windows of
# every large segment of the clear capture in the sealed one (none may be
# there; all are in the clear one). Files: DIR/off.pcap, DIR/auto.pcap.
# Needs root, iproute2, tcpdump.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-capture}
command -v tcpdump >/dev/null || {
  echo "seal_capture: needs tcpdump (apt-get install tcpdump)" >&2
  exit 2
}
mkdir -p "$dir"
collie=$PWD/build/release/bin/collie
tools/cluster.sh up 2 1gbit
trap 'tools/cluster.sh down' EXIT
for seal in off auto; do
  rm -f "$dir/$seal.pcap" "$dir/$seal.tcpdump"
  tools/cluster.sh run 1 tcpdump -i eth0 -s 0 -U -w "$dir/$seal.pcap" tcp 2>"$dir/$seal.tcpdump" &
  dump=$!
  # tcpdump says when it listens: the job starts after that, not after a sleep.
  for ((i = 0; i < 600; ++i)); do
    grep -q "listening on" "$dir/$seal.tcpdump" 2>/dev/null && break
    sleep 0.05
  done
  grep -q "listening on" "$dir/$seal.tcpdump"
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  pids=()
  for h in 0 1; do
    tools/cluster.sh run $h env RANK=$h WORLD_SIZE=2 MASTER_ADDR="$(tools/cluster.sh addr 0)" \
      MASTER_PORT=29500 COLLIE_SOCKET_IFNAME=eth0 COLLIE_STORE_TOKEN="$token" COLLIE_SEAL=$seal \
      "$collie" bench all_reduce -b 16M -e 16M -n 1 -w 0 >/dev/null 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  kill -INT "$dump"
  wait "$dump" || true
done
python3 tools/peers/seal_capture.py "$dir/off.pcap" "$dir/auto.pcap"
