#!/usr/bin/env bash
# The GPU image's package installs (containers/Dockerfile.cuda: its bare
# toolchain, trixie with the local packages, the CUDA toolkit, LibTorch 2.6
# CUDA and NCCL; then its runtime, trixie with the libraries the programs
# load) built from an earlier commit's Dockerfile and from this tree's, one
# after the other on an otherwise idle machine. Each side's Dockerfile sets
# a variable of its own in its first stage, so that none of its steps comes
# from the layer cache but its own:
#   toolchain  `--target toolchain-base`: every stage up to the bare
#              toolchain;
#   runtime    `--target runtime`, on the stages the first built, with the
#              `binaries` stage replaced by the compiling stage's install
#              tree (IMAGE, default localhost/scdino:cuda-test-build, which
#              scripts/test.sh's GPU image build tags): no compile.
# So each side's two builds install and commit what a cold build of its
# Dockerfile does, each step once.
# The .deb files come from the apt cache mount both times (build the image
# once before to fill it), so what differs is what dpkg unpacks and the
# engine commits, not the download. Prints each build's wall time, the CPU
# time of the engine and its children, and the image's size.
#
#   bash bench/gpu_toolchain_ab.sh [REV [IMAGE]]     # REV: the earlier commit [HEAD]
#
# Needs about 30 GB free in the engine's storage; the images are removed at
# the end.
#
# docs/performance.md#the-gpu-images-toolchain has its figures.
set -euo pipefail
rev=${1:-HEAD}
compiled=${2:-localhost/scdino:cuda-test-build}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
source containers/engine.sh
scdino_engine_init
tmp=$(mktemp -d)
images=(scdino-toolchain-ab:a scdino-toolchain-ab:b scdino-runtime-ab:a scdino-runtime-ab:b)
trap 'rm -rf "$tmp"; "$scdino_engine" rmi -f "${images[@]}" >/dev/null 2>&1 || true' EXIT
mkdir -p "$tmp/empty" "$tmp/binaries/opt/scdino"
"$scdino_engine" image exists "$compiled" ||
  { echo "gpu_toolchain_ab: no $compiled (scripts/build-image.sh --cuda --build-stage tags it)" >&2; exit 1; }
cid=$("$scdino_engine" create "$compiled" true)
"$scdino_engine" cp "$cid:/opt/scdino/install" "$tmp/binaries/opt/scdino/"
"$scdino_engine" rm "$cid" >/dev/null
git show "$rev:containers/Dockerfile.cuda" > "$tmp/Dockerfile.a"
cp containers/Dockerfile.cuda "$tmp/Dockerfile.b"
for side in a b; do
  sed -i "s/^FROM \${BASE_IMAGE} AS debian$/&\nENV SCDINO_AB=$side-$$-$(date +%s)/" "$tmp/Dockerfile.$side"
  grep -q "^ENV SCDINO_AB=" "$tmp/Dockerfile.$side" || { echo "gpu_toolchain_ab: no debian stage in side $side" >&2; exit 1; }
done
args=(build "${scdino_engine_flags[@]}" --build-arg CUDNN=stub --build-context "cudnn=$tmp/empty")
[ "$scdino_engine" = podman ] && args+=(--network host)
# measure SIDE NAME WHAT ARGS...: one build, timed; prints its line.
measure() {
  local side=$1 name=$2 what=$3 wall user sys size
  shift 3
  /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$scdino_engine" "${args[@]}" "$@" -f "$tmp/Dockerfile.$side" . \
    > "$tmp/build.$side.$what.log" 2>&1 ||
    { tail -20 "$tmp/build.$side.$what.log"; echo "gpu_toolchain_ab: the $what build of side $side failed" >&2; exit 1; }
  read -r wall user sys < "$tmp/time"
  size=$("$scdino_engine" image inspect --format '{{.Size}}' "scdino-$what-ab:$side")
  awk -v n="$name" -v t="$what" -v w="$wall" -v u="$user" -v s="$sys" -v b="$size" \
    'BEGIN { printf "%-10s %-9s %8.1f s wall %8.1f s CPU %6.2f GB\n", n, t, w, u + s, b / 1e9 }'
  echo "$wall $user $sys" >> "$tmp/sum.$side"
}
for side in a b; do
  name=$([ "$side" = a ] && echo "$rev" || echo "this tree")
  measure "$side" "$name" toolchain --target toolchain-base -t "scdino-toolchain-ab:$side"
  measure "$side" "$name" runtime --target runtime --build-context "binaries=$tmp/binaries" -t "scdino-runtime-ab:$side"
  awk -v n="$name" '{ w += $1; c += $2 + $3 }
    END { printf "%-10s %-9s %8.1f s wall %8.1f s CPU\n", n, "both", w, c }' "$tmp/sum.$side"
done
