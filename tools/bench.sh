#!/usr/bin/env bash
# The main job: builds collie (release) and runs its benchmarks over loopback
# with the built-in store: point-to-point between two ranks (next to raw TCP),
# then the store itself. Extra arguments go to `collie bench p2p`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
build/release/bin/collie bench p2p "$@"
exec build/release/bin/collie bench store --clients 4 --seconds 1
