#!/usr/bin/env bash
# Builds and runs every test, in every test preset (docs/building.md says
# what each runs, and how long it takes):
#   release   optimized build (with CUDA device buffers where the toolkit is found): every test
#   nocuda    optimized build with -DCOLLIE_CUDA=OFF: the tests of the code that differs
#             without CUDA (COLLIE_TEST_SCOPE=device; release tests the rest, the same code)
#   asan      AddressSanitizer + UndefinedBehaviorSanitizer (the matrices between processes
#             on fewer worlds)
#   tsan      ThreadSanitizer (the pure single-threaded cases and the CLI's cases tagged
#             [volume] are left to the others)
#   fuzz      clang + libFuzzer: the store's parsers, for COLLIE_FUZZ_SECONDS (20) each
# Runs all of them even when one fails, then prints one line per preset and
# a total, and exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --test || exit 1

jobs=$(nproc)
# The tests mostly wait on sockets and child processes: run more than one per core.
test_jobs=$((jobs * 2))
summary=()
failed_names=()
failed_output=$(mktemp)
passed_total=0
failed_total=0

# ctest's last "N% tests passed, M failed out of T" line of a log, into the
# totals and the summary (as "$2: ...").
count_result() {
  local log=$1 what=$2 line passed failed total
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    summary+=("$what: NO TEST RESULT")
    failed_total=$((failed_total + 1))
    return
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
  passed=$((total - failed))
  passed_total=$((passed_total + passed))
  failed_total=$((failed_total + failed))
  summary+=("$what: $passed passed, $failed failed")
  # ctest's list of the failed tests, kept for the summary: a log's tail
  # (all that a CI page may show) then names them.
  local name
  while IFS= read -r name; do
    failed_names+=("$what: ${name#"${name%%[![:space:]]*}"}")
  done < <(sed -n '/^The following tests FAILED:/,/^$/p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ')
  # And the last 40 lines of what each failed test printed, for the same tail.
  awk -v what="$what" '
    /Test +#[0-9]+: .*\*\*\*/ && !/\*\*\*Skipped/ { if (keep) flush(); keep = 1; n = 0; head = what ": " $0; next }
    keep && (/^ +Start +[0-9]+:/ || /^[0-9]+\/[0-9]+ Test +#/ || /^[0-9]+% tests passed/) { flush(); keep = 0 }
    keep { line[n++ % 40] = $0 }
    function flush(  i, from) {
      print "--- " head
      from = n > 40 ? n - 40 : 0
      for (i = from; i < n; i++) print line[i % 40]
      n = 0
    }
    END { if (keep) flush() }' "$log" >>"$failed_output"
}

# The compiler cache's hits and misses so far (ccache's counters, where the
# build compiles through it: third_party/compiler_cache.cmake), as "HITS MISSES".
cache_counts() {
  command -v ccache >/dev/null || { echo "0 0"; return; }
  ccache --print-stats 2>/dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 }
    $1 == "cache_miss" { misses = $2 }
    END { print hits + 0, misses + 0 }'
}

# Each preset's build and test times, for the summary (and every note).
times=()

run_preset() {
  local preset=$1 log began built tested hits misses hits_after misses_after cache=""
  log=$(mktemp)
  echo "=== preset $preset: configure and build"
  read -r hits misses < <(cache_counts)
  began=$SECONDS
  if ! cmake --preset "$preset" -DCOLLIE_FUZZ_SECONDS="${COLLIE_FUZZ_SECONDS:-20}" >"$log" 2>&1 ||
     ! cmake --build --preset "$preset" -j "$jobs" >>"$log" 2>&1; then
    cat "$log"
    summary+=("$preset: BUILD FAILED")
    failed_total=$((failed_total + 1))
    rm -f "$log"
    return
  fi
  built=$((SECONDS - began))
  read -r hits_after misses_after < <(cache_counts)
  if grep -q '^COLLIE_CCACHE:BOOL=ON' "build/$preset/CMakeCache.txt" 2>/dev/null &&
     grep -q '^COLLIE_CCACHE_PROGRAM:FILEPATH=.' "build/$preset/CMakeCache.txt"; then
    cache=", ccache $((hits_after - hits)) hits, $((misses_after - misses)) misses"
  fi
  echo "=== preset $preset: built in $built s$cache; test"
  began=$SECONDS
  # torch's own distributed suite (label torch_suite, release only) runs
  # after the others, its time counted apart.
  ctest --preset "$preset" -j "$test_jobs" -LE torch_suite --output-on-failure 2>&1 | tee "$log"
  count_result "$log" "$preset"
  tested=$((SECONDS - began))
  times+=("$(printf '%-8s build %4d s%s; test %4d s' "$preset" "$built" "$cache" "$tested")")
  test_seconds=$((test_seconds + tested))
  if [ "$preset" = release ] && ctest --preset release -N -L torch_suite 2>/dev/null |
      grep -q 'Total Tests: [1-9]'; then
    echo "=== preset release: torch's distributed test suite (counted apart)"
    began=$SECONDS
    ctest --preset release -L torch_suite --output-on-failure 2>&1 | tee "$log"
    count_result "$log" "release, torch's suite"
    times+=("$(printf "%-8s torch's suite %4d s" release $((SECONDS - began)))")
  fi
  rm -f "$log"
}

start=$SECONDS
test_seconds=0
for preset in release nocuda asan tsan fuzz; do
  # Without a CUDA toolkit the release build is already one without CUDA.
  if [ "$preset" = nocuda ] && ! grep -q '^COLLIE_CUDA_BUILT_IN:INTERNAL=ON' build/release/CMakeCache.txt 2>/dev/null; then
    summary+=("nocuda: skipped (no CUDA toolkit: the release preset is built without CUDA)")
    continue
  fi
  run_preset "$preset"
done

if [ -s "$failed_output" ]; then
  echo
  echo "=== what the failed tests printed last"
  cat "$failed_output"
fi
rm -f "$failed_output"
echo
echo "=== summary ($((SECONDS - start)) s)"
printf '  %s\n' "${summary[@]}"
echo "times (the presets' tests $test_seconds s, torch's suite apart):"
printf '  %s\n' "${times[@]}"
if [ "${#failed_names[@]}" -gt 0 ]; then
  echo "failed:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "collie: $passed_total passed, $failed_total failed"
[ "$failed_total" -eq 0 ]
