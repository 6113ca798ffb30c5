#!/usr/bin/env bash
# How long a job of NODES launchers x NPROC ranks (default 8 x 8) takes from
# start to end when its launchers meet in etcd, against the same job on
# c10d (the launchers meet in a collie store one of them hosts), on this
# one host, interleaved, RUNS times (default 5). Each rank is
# collie_collective_worker's "stall 0": init, four checked all_reduces, exit.
# etcd is one member on loopback with TLS and client certificates (openssl
# makes them), as a user runs it; INSECURE=1 uses plain HTTP instead.
# Needs etcd-server and openssl (tools/setup.sh --test) and a release build.
#   tools/peers/etcd_rendezvous.sh            # prints one line per job
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
collie=${COLLIE:-$root/build/release/bin/collie}
worker=${WORKER:-$root/build/release/test/collie_collective_worker}
nodes=${NODES:-8}
nproc=${NPROC:-8}
runs=${RUNS:-5}
dir=$(mktemp -d)
etcd_pid=
trap '[ -n "$etcd_pid" ] && kill $etcd_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One member; its port was free a moment ago (etcd 3.4's gateway cannot take port 0).
port=$(free_port)
if [ "${INSECURE:-0}" = 1 ]; then
  scheme=http
  tls_server=()
  conf="protocol=http"
  insecure=(--insecure)
else
  scheme=https
  cd "$dir"
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > server.ext
  printf 'extendedKeyUsage=clientAuth\n' > client.ext
  for k in ca server client; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $k-key.pem 2>/dev/null
  done
  openssl req -x509 -new -key ca-key.pem -days 2 -subj /CN=ca -out ca.pem
  for k in server client; do
    openssl req -new -key $k-key.pem -subj /CN=$k -out $k.csr
    openssl x509 -req -in $k.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile $k.ext -out $k.pem 2>/dev/null
  done
  cd - >/dev/null
  tls_server=(--client-cert-auth --trusted-ca-file "$dir/ca.pem" --cert-file "$dir/server.pem"
              --key-file "$dir/server-key.pem")
  conf="cacert=$dir/ca.pem,cert=$dir/client.pem,key=$dir/client-key.pem"
  insecure=()
fi
etcd --name m0 --data-dir "$dir/etcd" \
  --listen-client-urls $scheme://127.0.0.1:$port --advertise-client-urls $scheme://127.0.0.1:$port \
  --listen-peer-urls http://127.0.0.1:0 --initial-advertise-peer-urls http://127.0.0.1:0 \
  --initial-cluster m0=http://127.0.0.1:0 "${tls_server[@]}" >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
until grep -q "ready to serve client requests" "$dir/etcd.log"; do sleep 0.1; done
head -c 32 /dev/urandom | base64 > "$dir/token"

job() {
  local start pids=() bad=0
  start=$(date +%s.%N)
  for _ in $(seq 1 "$nodes"); do
    "$collie" launch --nnodes "$nodes" --nproc-per-node "$nproc" "$@" --token-file "$dir/token" \
      -- "$worker" stall 0 >/dev/null 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  printf '%.2f s%s' "$(echo "$(date +%s.%N) - $start" | bc)" \
    "$([ $bad -gt 0 ] && echo " ($bad launchers failed)")"
}

echo "$nodes nodes x $nproc ranks on one host; etcd over $scheme"
for i in $(seq 1 "$runs"); do
  c10d=$(job --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$(free_port)")
  etcd=$(job --rdzv-backend etcd --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "run$i" \
           --rdzv-conf "$conf" "${insecure[@]}")
  echo "run $i: c10d $c10d, etcd $etcd"
done
