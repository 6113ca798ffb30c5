#!/usr/bin/env bash
# The main job: builds collie (release) and the first programs of
# runtime/examples (the README runs them), and runs the all_reduce benchmark
# with four ranks over loopback and the built-in store (8 B to 64 MiB, every
# row checked). Extra arguments go to `collie bench all_reduce` (for
# example --ranks 2, -b 1K -e 1M, --algo all, --plot bw.svg).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# The main job needs no test framework: the tests are left out of the build
# (tools/test.sh's configure puts them back in the same build folder).
cmake --preset release -DCOLLIE_BUILD_TESTS=OFF >/dev/null
cmake --build --preset release --target collie_cli examples
# Four ranks unless the arguments say how many.
ranks=(--ranks 4)
for arg in "$@"; do
  case $arg in --ranks|--ranks=*) ranks=() ;; esac
done
exec build/release/bin/collie bench all_reduce "${ranks[@]}" "$@"
