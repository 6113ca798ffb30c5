#!/usr/bin/env bash
# The main job: builds collie (release) and runs its benchmark with the
# built-in store over loopback. Extra arguments go to `collie bench store`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec build/release/bin/collie bench store "$@"
