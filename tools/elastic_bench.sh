#!/usr/bin/env bash
# A lost rank's cost to a torch training loop: going on in place against a
# whole restart, interleaved, on 2 hosts of tools/cluster.sh (up first:
# tools/cluster.sh up 2 1gbit).
#
#   tools/elastic_bench.sh [ROUNDS]     (default 5; needs root, python3-torch, build/release)
#
# Each round runs runtime/examples/torch/elastic.py twice, 2 ranks per host
# under `collie launch --nnodes 2`, 60 steps, rank 2 killed (SIGKILL) in the
# middle of step 15's all_reduce, rank 0 checkpointing after every step:
#   in place:  --keep-going --max-restarts 1 (the survivors recover in their
#              processes; a replacement joins at their next expand())
#   restart:   --max-restarts 1 (every rank stopped, restarted, resumed from
#              the checkpoint)
# and prints, for each, the time from the death to the first step finished
# after the job is back (the first "step S done" after the earliest
# "recovered" or "resumed from the checkpoint" line, on the clock every
# process shares), with the phases: the first failure seen, and the job back.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
collie=build/release/bin/collie
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # mode
  local mode=$1 port=$((29600 + RANDOM % 300)) token
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local flags=(--max-restarts 1)
  [ "$mode" = "in place" ] && flags+=(--keep-going)
  rm -f "$out/ck.pt"
  local pids=()
  for h in 0 1; do
    tools/cluster.sh run $h env PYTHONPATH=build/release/python ELASTIC_KILL=2:15 ELASTIC_STEPS=60 \
      ELASTIC_CHECKPOINT="$out/ck.pt" COLLIE_STORE_TOKEN="$token" COLLIE_LOG_LEVEL=warn \
      COLLIE_SOCKET_IFNAME=eth0 "$collie" launch --nnodes 2 --node_rank $h --nproc_per_node 2 \
      --master_addr "$(tools/cluster.sh addr 0)" --master_port $port "${flags[@]}" -- \
      /usr/bin/python3 runtime/examples/torch/elastic.py >"$out/out_$h" 2>"$out/err_$h" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  cat "$out/out_0" "$out/out_1" >"$out/all"
  local death back failed next ranks
  death=$(grep -o "dying (clock [0-9]*" "$out/all" | grep -o "[0-9]*$")
  failed=$(grep -o "step [0-9]* failed (clock [0-9]*" "$out/all" | grep -o "[0-9]*$" | sort -n | head -1)
  back=$(grep -o "\(recovered with 3 ranks at step [0-9]*\|resumed from the checkpoint at step [0-9]*\) (clock [0-9]*" \
    "$out/all" | grep -o "[0-9]*$" | sort -n | head -1)
  next=$(grep -o "step [0-9]* done (clock [0-9]*" "$out/all" | grep -o "[0-9]*$" |
    awk -v d="$back" '$1 > d' | sort -n | head -1)
  ranks=$(grep -o "done 60 steps on [0-9] ranks, weights match" "$out/all" | grep -o "on [0-9]" | sort | uniq -c |
    awk '{printf "%s%d finished on %d ranks", (NR > 1 ? ", " : ""), $1, $3}')
  printf '%-9s %6d ms to the next step (failure seen +%d ms, back +%d ms; %s)\n' "$mode" \
    $((next - death)) $((failed - death)) $((back - death)) "$ranks"
}

for ((i = 0; i < rounds; ++i)); do
  run "in place"
  run "restart"
done
