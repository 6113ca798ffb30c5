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
#   tools/cluster.sh run I CMD ...   run CMD on host I (as root, in its namespace)
#   tools/cluster.sh addr I          host I's address
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
prefix=10.78.0
allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control
saved_allowed=/run/collie-cluster.allowed  # the list before up added CC

addr() { echo "$prefix.$(($1 + 1))"; }

shape() {  # device, rate: a bucket of 256 KB (iperf3: 0.957 Gbit/s at 1gbit; 64 KB starves several flows at once)
  tc qdisc replace dev "$1" root tbf rate "$2" burst 256kb latency 20ms
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '/^collie-h[0-9]+/ {print $1}'); do
    ip netns delete "$ns"
  done
  ip link delete "$bridge" 2>/dev/null || true
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
  local hosts=$1 rate=${2:-1gbit} cc=${CC:-cubic}
  down
  allow "$cc"
  ip link add "$bridge" type bridge
  ip addr add "$prefix.254/24" dev "$bridge"
  ip link set "$bridge" up
  for ((i = 0; i < hosts; ++i)); do
    local ns=collie-h$i outer=collie-v$i inner=eth0
    ip netns add "$ns"
    ip link add "$outer" type veth peer name "$inner" netns "$ns"
    ip link set "$outer" master "$bridge" up
    ip -n "$ns" addr add "$(addr "$i")/24" dev "$inner"
    ip -n "$ns" link set "$inner" up
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"
    shape "$outer" "$rate"                            # into the host
    ip netns exec "$ns" bash -c "$(declare -f shape); shape $inner $rate"  # out of it
  done
  echo "cluster: $hosts hosts ($(addr 0) ...), links $rate both ways, TCP $cc"
}

case ${1:-} in
  up) up "${2:?tools/cluster.sh up H [RATE]}" "${3:-1gbit}" ;;
  down) down ;;
  addr) addr "${2:?tools/cluster.sh addr I}" ;;
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
