#!/usr/bin/env bash
# The README's two commands as a brand-new machine meets them, on any
# machine with podman: inside a privileged container from the bare Debian 12
# image (scdino_debian_base in containers/engine.sh: mmdebstrap's minbase,
# no compiler, no podman, no caches), with an empty image storage of its own
# and its own network namespace, the checkout's ../shared beside the clone.
# First, what a Debian 12 VM has and the bare image lacks (git,
# ca-certificates, iproute2, procps, curl, file, kmod, sudo); then a fresh
# clone of REV and, in the README's order, each alone:
#   bash scripts/run-example.sh
#   bash scripts/test.sh          (left out with --example-only)
# The host reads /proc/stat every 5 s. At the end: each command's exit
# status, wall time and the machine's CPU seconds while it ran (user, nice,
# system with interrupts, idle with I/O wait), then the commands' own
# tables (where their time went). It exits 1 when a command or the
# container failed.
#
#   bash bench/brand_new.sh [--example-only] [REV]    # REV: HEAD by default
#
# Run it as root on an otherwise idle machine: what else runs is counted.
# The test command in the container needs about 40 GB free under /var/tmp
# (its images); the logs stay in the directory printed at the start, the
# container's image storage is removed at the end. Without ../shared beside
# the checkout, SCDINO_SHARED_DIR names it. docs/performance.md#test-time
# has the figures.
set -euo pipefail
usage="usage: bash bench/brand_new.sh [--example-only] [REV]"
example_only=0 rev=HEAD status=0
while [ $# -gt 0 ]; do
  case $1 in
    --example-only) example_only=1 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "brand_new: unknown option $1; $usage" >&2; exit 2 ;;
    *) rev=$1 ;;
  esac
  shift
done
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
sha=$(git -C "$src" rev-parse "$rev^{commit}" 2>/dev/null) ||
  { echo "brand_new: $rev is not a commit of $src" >&2; exit 2; }
shared=${SCDINO_SHARED_DIR:-$src/../shared}
[ -d "$shared/reference" ] ||
  { echo "brand_new: $shared has no reference/ (the tests' data): set SCDINO_SHARED_DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "brand_new: needs root (a privileged container)" >&2; exit 2; }
# shellcheck source=containers/engine.sh
source "$src/containers/engine.sh"
scdino_engine_init
[ "$scdino_engine" = podman ] ||
  { echo "brand_new: needs podman (a privileged container with its own image storage); found $scdino_engine" >&2; exit 2; }
base=docker.io/library/debian:12
scdino_debian_base "$base"

work=$(mktemp -d -p /var/tmp)
mkdir "$work/logs" "$work/storage" && : > "$work/logs/marks"
echo "brand_new: $(git -C "$src" log --oneline -1 "$sha"); logs in $work/logs"
cat > "$work/logs/inside.sh" <<EOF
set -uo pipefail
mark() { echo "\$1 \$(date +%s) \${2:-}" >> /x/logs/marks; }
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
  git ca-certificates iproute2 procps curl file kmod sudo > /dev/null || exit 1
git clone -q /x/src /x/scdino && cd /x/scdino && git checkout -q $sha || exit 1
mark example; bash scripts/run-example.sh > /x/logs/example.log 2>&1; mark example-end \$?
[ $example_only = 1 ] && exit 0
mark test; bash scripts/test.sh > /x/logs/test.log 2>&1; mark test-end \$?
EOF

(while :; do echo "$(date +%s) $(head -1 /proc/stat)"; sleep 5; done) > "$work/logs/stat.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true; rm -rf "$work/storage"' EXIT
podman run --rm --privileged --shm-size 8g --ulimit nofile=20000:20000 --ulimit nproc=8192:8192 \
  -v "$work/storage:/var/lib/containers" -v "$src:/x/src:ro" -v "$shared:/x/shared:ro" \
  -v "$work/logs:/x/logs" "$base" bash /x/logs/inside.sh || { status=$?; echo "brand_new: the container exited $status"; }
echo "$(date +%s) $(head -1 /proc/stat)" >> "$work/logs/stat.txt"

# From the marks and the samples: each command's status, wall time and CPU.
awk '
  FNR == NR { t[++n] = $1; for (i = 3; i <= 10; i++) v[n, i] = $i; next }
  function at(s,   k) { for (k = 1; k < n && t[k] < s; k++); return k }
  $1 == "example" || $1 == "test" { name = $1; start = $2; next }
  $1 ~ /-end$/ {
    a = at(start); b = at($2)
    u = v[b, 3] - v[a, 3]; ni = v[b, 4] - v[a, 4]
    sy = (v[b, 5] + v[b, 8] + v[b, 9]) - (v[a, 5] + v[a, 8] + v[a, 9])
    id = (v[b, 6] + v[b, 7]) - (v[a, 6] + v[a, 7])
    printf "%-8s exit %s, %d s wall; CPU s: user %d, nice %d, system %d, idle %d\n",
      name, $3, $2 - start, u / 100, ni / 100, sy / 100, id / 100
  }' "$work/logs/stat.txt" "$work/logs/marks"
for log in example test; do
  [ -f "$work/logs/$log.log" ] || continue
  echo "--- $log.log, its end:"
  tail -n 22 "$work/logs/$log.log"
done
# A command that failed, or a container that did not get to run them, fails
# the measurement too.
awk '$1 ~ /-end$/ && $3 != 0 { bad = 1 } END { exit bad }' "$work/logs/marks" 2>/dev/null || status=1
exit "$status"
