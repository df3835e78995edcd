#!/usr/bin/env bash
# The main job's build (scripts/run-example.sh: the five programs) from
# nothing, as on a brand-new machine: each commit cloned afresh, configured
# and built by scripts/setup.sh with the compiler cache off
# (CCACHE_DISABLE=1), one after the other; run it on an otherwise idle
# machine. Prints each build's wall and CPU time, and its longest steps
# with their summed step time from ninja's log. With --empty-cache each
# build goes through the compiler cache, empty, as a brand-new machine's
# first build does (what a miss costs besides the compile).
#
#   bash bench/cold_build.sh [--empty-cache] REV [REV...]   # e.g. 9dc1315 HEAD
#
# The Debian packages must be installed (scripts/install-deps.sh build).
# docs/performance.md ("Thin mains") has its figures.
set -euo pipefail
cache=(CCACHE_DISABLE=1)
[ "${1:-}" != --empty-cache ] || { cache=(); shift; }
[ $# -ge 1 ] || { echo "usage: bash bench/cold_build.sh [--empty-cache] REV [REV...]" >&2; exit 2; }
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
programs=(scdino-synth scdino-stats scdino-trainer scdino-features scdino-eval)
for rev in "$@"; do
  sha=$(git -C "$src" rev-parse --short "$rev^{commit}") || { echo "cold_build: $rev is not a commit of $src" >&2; exit 2; }
  dir="$work/$sha"
  git clone -q "$src" "$dir" && git -C "$dir" checkout -q "$sha"
  rm -rf "$work/ccache"
  (cd "$dir" && env "${cache[@]}" CCACHE_DIR="$work/ccache" /usr/bin/time -f "%e %U %S" -o "$work/time" \
     bash scripts/setup.sh "${programs[@]}" > "$work/$sha.log" 2>&1) ||
    { tail -20 "$work/$sha.log"; echo "cold_build: the build of $sha failed" >&2; exit 1; }
  read -r wall user sys < "$work/time"
  echo "$sha: ${wall} s wall, ${user} s user, ${sys} s system"
  awk 'NR > 1 { t = ($2 - $1) / 1000; sum += t; printf "%7.1f %s\n", t, $4 } END { printf "%7.1f (every step)\n", sum }' \
    "$dir/build/.ninja_log" | sort -rn | head -9
  rm -rf "$dir"
done
