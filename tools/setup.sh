#!/usr/bin/env bash
# Installs what collie needs, from Debian packages only, and nothing that is
# already there (ccache: the compiler cache the build uses where it is found,
# third_party/compiler_cache.cmake). Called by tools/bench.sh and tools/test.sh; safe to re-run.
#   tools/setup.sh          build dependencies
#   tools/setup.sh --test   plus what the tests need (Catch2, clang + libFuzzer, chromium for the
#                           explain page's browser test, iproute2 for the multi-host tests in
#                           network namespaces, Slurm's daemons and srun for the Slurm test,
#                           torch (1.13 on Debian 12, 2.6 on 13) with its C++ headers and pybind11 for the
#                           torch.distributed backend and its tests (and setuptools, which torch 2.6's
#                           own test suite imports), etcd and openssl for the etcd store's tests: a
#                           real cluster, with certificates)
set -euo pipefail

packages=(cmake ninja-build ccache g++ libasio-dev libspdlog-dev libfmt-dev libssl-dev libcli11-dev nlohmann-json3-dev libcurl4-openssl-dev)
if [ "${1:-}" = "--test" ]; then
  packages+=(catch2 clang libclang-rt-dev chromium iproute2 slurmd slurmctld slurm-client
             python3-torch libtorch-dev pybind11-dev python3-setuptools etcd-server openssl)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "collie setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "collie setup: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
