#!/usr/bin/env bash
# Runs the README's two commands as a new user would, on a fresh Debian:
# debootstrap (minbase) makes the release's root file system, apt installs
# only g++ cmake git ca-certificates sudo without recommended packages, the
# commit under test is cloned, and tools/bench.sh then tools/test.sh run in
# it as root. Prints each command's exit code and time; exits non-zero if
# either failed.
#   tools/fresh_debian.sh trixie|bookworm [--bench-only] [--keep] [--commit REV]
# Needs root, debootstrap and network access to Debian's archive. The
# release's packages are cached in $COLLIE_FRESH_CACHE (default
# /var/cache/collie-fresh), so a second run downloads nothing it has; the
# root file system is made anew each run under $COLLIE_FRESH_ROOT (default
# /var/tmp/collie-fresh) and removed afterwards unless --keep.
set -euo pipefail
cd "$(dirname "$0")/.."

release=${1:-}
case $release in
  trixie | bookworm) ;;
  *) echo "usage: tools/fresh_debian.sh trixie|bookworm [--bench-only] [--keep] [--commit REV]" >&2; exit 2 ;;
esac
shift
bench_only=0 keep=0 commit=HEAD
while [ $# -gt 0 ]; do
  case $1 in
    --bench-only) bench_only=1 ;;
    --keep) keep=1 ;;
    --commit) commit=$2; shift ;;
    *) echo "tools/fresh_debian.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "tools/fresh_debian.sh: run as root (debootstrap, chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "tools/fresh_debian.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
commit=$(git rev-parse --verify "$commit^{commit}")
source_repo=$(git rev-parse --show-toplevel)

cache=${COLLIE_FRESH_CACHE:-/var/cache/collie-fresh}
roots=${COLLIE_FRESH_ROOT:-/var/tmp/collie-fresh}
root=$roots/$release-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$cache/debootstrap/$release" "$cache/apt/$release" "$roots"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  # The cache is on the same file system: never remove through a mount.
  if grep -q " $root/" /proc/mounts; then
    echo "fresh $release: $root still has mounts; left in place" >&2
  elif [ "$keep" -eq 0 ]; then
    rm -rf --one-file-system "$root"
  else
    echo "fresh $release: kept $root"
  fi
}
trap cleanup EXIT
bind() {  # bind <from> <to inside the root>
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}

start=$SECONDS
echo "=== fresh $release: debootstrap --variant=minbase into $root"
debootstrap --variant=minbase --cache-dir="$cache/debootstrap/$release" "$release" "$root" \
  http://deb.debian.org/debian >"$root.debootstrap.log" 2>&1 ||
  { tail -n 20 "$root.debootstrap.log"; exit 1; }
rm -f "$root.debootstrap.log"
for m in /proc /sys /dev /dev/pts /dev/shm; do bind "$m" "$m"; done
# apt keeps what it downloads here, between runs.
bind "$cache/apt/$release" /var/cache/apt/archives
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The clone, as a user makes one (from this repository, at the commit under test).
git clone -q --no-hardlinks "$source_repo" "$root/root/collie"
git -C "$root/root/collie" checkout -q "$commit"
echo "=== fresh $release: apt-get install g++ cmake git ca-certificates sudo ($((SECONDS - start)) s)"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash -c 'set -e; apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      g++ cmake git ca-certificates sudo >/dev/null'

run() {  # run <command>: in the clone, as a login shell of root would
  local began=$SECONDS rc=0
  echo "=== fresh $release: $1"
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root TERM=dumb LANG=C.UTF-8 bash -c "cd /root/collie && $1" || rc=$?
  results+=("$1: exit $rc, $((SECONDS - began)) s")
  [ "$rc" -eq 0 ] || failed=1
}
results=()
failed=0
run tools/bench.sh
[ "$bench_only" -eq 1 ] || run tools/test.sh
echo
echo "=== fresh $release at ${commit:0:12} ($((SECONDS - start)) s in all)"
printf '  %s\n' "${results[@]}"
exit "$failed"
