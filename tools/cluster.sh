#!/usr/bin/env bash
# A cluster on one machine, for benchmarks across hosts: H network
# namespaces ("hosts" collie-h0 ... collie-h<H-1>, addresses 10.78.0.1 ...)
# on a bridge, each host's link shaped to RATE both ways with tbf (netem is
# not in every kernel). The bridge itself is 10.78.0.254, so a program in
# the root namespace (mpirun) reaches every host.
#
#   tools/cluster.sh up H [RATE]     make H hosts (RATE: tc's words, default 1gbit)
#                                    whose TCP congestion control is $CC (default
#                                    cubic, Linux's own default; the machine's
#                                    may be bbr, whose PROBE_RTT holds a flow at
#                                    4 packets for 200 ms every 10 s)
#       NICS=N                       each host has N links (eth0, eth1, ...), link n
#                                    on a bridge of its own, 10.(78+n).0.0/24, each
#                                    shaped to RATE (default 1)
#       FLOW_CAP=R[,R...]            each TCP flow on a link capped at R besides the
#                                    link's RATE, as clouds cap a flow: htb, a class
#                                    per flow chosen by a u32 hash of its ports' low
#                                    6 bits (64 classes; two flows meet in one by
#                                    chance); with a list, each class takes one of
#                                    its caps in turn
#   tools/cluster.sh run I CMD ...   run CMD on host I (as root, in its namespace)
#   tools/cluster.sh addr I [N]      host I's address on link N (default 0)
#   tools/cluster.sh link I N up|down   take host I's link N down or up
#   tools/cluster.sh rsh HOST CMD    Open MPI's plm_rsh_agent: HOST is h<I>
#   tools/cluster.sh down            remove every host and the bridge
#
# Where CC is not in net.ipv4.tcp_allowed_congestion_control (one list for
# every namespace), up adds it and down puts the list back.
# Needs root, iproute2 (ip, tc). A host shares the machine's processors and
# memory with the others: only the links are those of a cluster. The
# transports tell the hosts apart by their network namespace, so collie
# uses TCP between them and shared memory within each.
set -euo pipefail
bridge=collie-br
allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control
saved_allowed=/run/collie-cluster.allowed  # the list before up added CC

addr() { echo "10.$((78 + ${2:-0})).0.$(($1 + 1))"; }
bridge_of() { if (($1 == 0)); then echo "$bridge"; else echo "$bridge$1"; fi; }

shape() {  # device, rate: a bucket of 256 KB (iperf3: 0.957 Gbit/s at 1gbit; 64 KB starves several flows at once)
  tc qdisc replace dev "$1" root tbf rate "$2" burst 256kb latency 20ms
}

# device, rate, caps (comma-separated): the link's rate in htb's class 1:1,
# under it 64 leaves for flows, 1:100-1:13f, leaf c at the list's (c / 2
# mod n)-th cap (halved: Linux gives a connecting socket an even port and
# a listener bound to port 0 an odd one, so c's parity is fixed for many
# flows; a leaf borrows all of its cap from 1:1, so the link's rate holds
# for the flows together), and 1:2 for what is not TCP. A flow's leaf is (s + d)
# mod 64, s and d the low 6 bits of its source and destination ports: u32
# hashes s (table 100:), then d (tables 200:-23f:), both in the word at
# offset 20 of an IPv4 header without options. Flows between the same two
# ports' low bits share a leaf, as a cloud's hash puts two flows on one path.
shape_flows() {
  local dev=$1 rate=$2 caps c s d
  IFS=, read -r -a caps <<<"$3"
  {
    echo "qdisc replace dev $dev root handle 1: htb default 2"
    echo "class add dev $dev parent 1: classid 1:1 htb rate $rate ceil $rate burst 256kb cburst 256kb quantum 60000"
    echo "class add dev $dev parent 1:1 classid 1:2 htb rate 1mbit ceil $rate burst 64kb cburst 64kb"
    for ((c = 0; c < 64; ++c)); do
      printf 'class add dev %s parent 1:1 classid 1:%x htb rate 1mbit ceil %s burst 64kb cburst 64kb\n' \
        "$dev" $((0x100 + c)) "${caps[c / 2 % ${#caps[@]}]}"
    done
    echo "filter add dev $dev parent 1: prio 1 handle 100: protocol ip u32 divisor 64"
    for ((s = 0; s < 64; ++s)); do
      printf 'filter add dev %s parent 1: prio 1 handle %x: protocol ip u32 divisor 64\n' "$dev" $((0x200 + s))
      printf 'filter add dev %s parent 1: prio 1 protocol ip u32 ht 100:%x: match u32 0 0 link %x: hashkey mask 0x0000003f at 20\n' \
        "$dev" "$s" $((0x200 + s))
      for ((d = 0; d < 64; ++d)); do
        printf 'filter add dev %s parent 1: prio 1 protocol ip u32 ht %x:%x: match u32 0 0 flowid 1:%x\n' \
          "$dev" $((0x200 + s)) "$d" $((0x100 + (s + d) % 64))
      done
    done
    echo "filter add dev $dev parent 1: prio 1 protocol ip u32 ht 800:: match ip protocol 6 0xff link 100: hashkey mask 0x003f0000 at 20"
  } | tc -batch -
}

down() {
  # The host ends first: a namespace's own go with it, but asynchronously.
  for v in $(ip -o link show type veth 2>/dev/null | awk -F'[:@] *' '{print $2}' | grep -E '^collie-v[0-9]+(-[0-9]+)?$'); do
    ip link delete "$v"
  done
  for ns in $(ip netns list 2>/dev/null | awk '/^collie-h[0-9]+/ {print $1}'); do
    ip netns delete "$ns"
  done
  for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E "^$bridge[0-9]*\$"); do
    ip link delete "$br"
  done
  if [ -f "$saved_allowed" ]; then
    cat "$saved_allowed" >"$allowed"
    rm -f "$saved_allowed"
  fi
}

allow() {  # congestion control: lets a namespace choose it
  grep -qw -- "$1" "$allowed" && return
  grep -qw -- "$1" /proc/sys/net/ipv4/tcp_available_congestion_control || modprobe "tcp_$1" 2>/dev/null || {
    echo "cluster: congestion control $1 is not in this kernel ($(cat /proc/sys/net/ipv4/tcp_available_congestion_control))" >&2
    exit 1
  }
  cat "$allowed" >"$saved_allowed"
  echo "$(cat "$allowed") $1" >"$allowed"
}

up() {
  local hosts=$1 rate=${2:-1gbit} cc=${CC:-cubic} nics=${NICS:-1} cap=${FLOW_CAP:-}
  down
  allow "$cc"
  for ((n = 0; n < nics; ++n)); do
    local br
    br=$(bridge_of "$n")
    ip link add "$br" type bridge
    ip addr add "10.$((78 + n)).0.254/24" dev "$br"
    ip link set "$br" up
  done
  for ((i = 0; i < hosts; ++i)); do
    local ns=collie-h$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"
    for ((n = 0; n < nics; ++n)); do
      local outer=collie-v$i inner=eth$n
      ((n == 0)) || outer=collie-v$i-$n
      ip link add "$outer" type veth peer name "$inner" netns "$ns"
      ip link set "$outer" master "$(bridge_of "$n")" up
      ip -n "$ns" addr add "$(addr "$i" "$n")/24" dev "$inner"
      ip -n "$ns" link set "$inner" up
      if [ -n "$cap" ]; then
        shape_flows "$outer" "$rate" "$cap"  # into the host
        ip netns exec "$ns" bash -c "$(declare -f shape_flows); shape_flows $inner $rate $cap"  # out of it
      else
        shape "$outer" "$rate"
        ip netns exec "$ns" bash -c "$(declare -f shape); shape $inner $rate"
      fi
    done
  done
  echo "cluster: $hosts hosts ($(addr 0) ...), $nics link(s) each, $rate both ways${cap:+, each flow at most $cap}, TCP $cc"
}

link() {  # host, link, up|down: its end leaves the bridge (down) or joins it again
  local outer=collie-v$1
  (($2 == 0)) || outer=collie-v$1-$2
  case $3 in
    down) ip link set "$outer" down ;;
    up) ip link set "$outer" up ;;
    *) echo "tools/cluster.sh link I N up|down" >&2; exit 2 ;;
  esac
}

case ${1:-} in
  up) up "${2:?tools/cluster.sh up H [RATE]}" "${3:-1gbit}" ;;
  down) down ;;
  addr) addr "${2:?tools/cluster.sh addr I [N]}" "${3:-0}" ;;
  link) link "${2:?tools/cluster.sh link I N up|down}" "${3:?}" "${4:?}" ;;
  run)
    host=${2:?tools/cluster.sh run I CMD ...}
    shift 2
    exec ip netns exec "collie-h$host" "$@"
    ;;
  rsh)
    # Open MPI calls its agent as: AGENT [options] HOST COMMAND...
    while [[ ${2:-} == -* ]]; do set -- "$1" "${@:3}"; done
    host=${2#h}
    shift 2
    exec ip netns exec "collie-h$host" /bin/sh -c "$*"
    ;;
  *)
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"  # the comment above
    exit 2
    ;;
esac
