#!/usr/bin/env bash
# The GPU image's bare toolchain (containers/Dockerfile.cuda up to its
# toolchain-base stage: trixie, the local packages, the CUDA toolkit,
# LibTorch 2.6 CUDA and NCCL) built twice with no layer cache, from an
# earlier commit's Dockerfile and from this tree's, one after the other on an
# otherwise idle machine. The .deb files come from the apt cache mount both
# times (run it once before to fill it), so what differs is what dpkg
# unpacks and the engine commits, not the download. Prints each build's
# wall time, the CPU time of the engine and its children, and the stage's
# size.
#
#   bash bench/gpu_toolchain_ab.sh [REV]     # REV: the earlier commit [HEAD]
#
# Needs about 25 GB free in the engine's storage (a stage and its commit's
# copy); the two stages are removed at the end.
#
# docs/performance.md#the-gpu-images-toolchain has its figures.
set -euo pipefail
rev=${1:-HEAD}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
source containers/engine.sh
scdino_engine_init
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; "$scdino_engine" rmi -f scdino-toolchain-ab:a scdino-toolchain-ab:b >/dev/null 2>&1 || true' EXIT
mkdir -p "$tmp/empty"
git show "$rev:containers/Dockerfile.cuda" > "$tmp/Dockerfile.a"
cp containers/Dockerfile.cuda "$tmp/Dockerfile.b"
args=(build "${scdino_engine_flags[@]}" --build-arg CUDNN=stub --build-context "cudnn=$tmp/empty"
      --target toolchain-base --no-cache)
[ "$scdino_engine" = podman ] && args+=(--network host)
for side in a b; do
  /usr/bin/time -f "%e %U %S" -o "$tmp/time.$side" \
    "$scdino_engine" "${args[@]}" -f "$tmp/Dockerfile.$side" -t "scdino-toolchain-ab:$side" . > "$tmp/build.$side.log" 2>&1 ||
    { tail -20 "$tmp/build.$side.log"; echo "gpu_toolchain_ab: the build of side $side failed" >&2; exit 1; }
  read -r wall user sys < "$tmp/time.$side"
  size=$("$scdino_engine" image inspect --format '{{.Size}}' "scdino-toolchain-ab:$side")
  name=$([ "$side" = a ] && echo "$rev" || echo "this tree")
  awk -v n="$name" -v w="$wall" -v c="$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')" -v b="$size" \
    'BEGIN { printf "%-10s %8.1f s wall %8.1f s CPU %6.2f GB\n", n, w, c, b / 1e9 }'
done
