#!/usr/bin/env bash
# What the GPU image's compile and the dependency pack's build share through
# one compiler cache (scdino_gpu_ccache, containers/engine.sh): the first
# contact's four targets compiled first as the image's compiling stage
# compiles them (its image, its configure), then as the pack's build does
# (the bare toolchain, the pack, scripts/gpu-first-contact.sh's configure),
# both at /opt/scdino/src and /opt/scdino/build and with the shared cache's
# ccache.conf, in a cache that starts empty; then the pack's build once more
# in a new tree, everything cached. Each build alone, one after the other;
# prints each one's wall time, CPU (user + system of the whole machine, from
# /proc/stat: run it on an otherwise idle machine) and the compiles it took
# from the cache.
#
#   bash bench/gpu_cache_share.sh [COMPILING_STAGE [TOOLCHAIN]]
#     defaults: localhost/scdino:cuda-test-build and its -toolchain, which
#     scripts/test.sh's GPU image build tags
#
# About 12 minutes on 2 cores. docs/performance.md#the-gpu-images-compile-and-the-packs-one-compiler-cache
# has its figures.
set -euo pipefail
stage=${1:-localhost/scdino:cuda-test-build}
toolchain=${2:-$stage-toolchain}
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/containers/engine.sh"
scdino_engine_init
for img in "$stage" "$toolchain"; do
  "$scdino_engine" image exists "$img" ||
    { echo "gpu_cache_share: no $img (scripts/build-image.sh --cuda --build-stage tags it)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$src/scripts/pack-gpu-deps.sh" "$tmp/pack" | tail -1
ccache_dir=$(SCDINO_GPU_CCACHE_DIR=$tmp/ccache scdino_gpu_ccache)
targets="scdino-bench-train-step scdino-bench-features scdino_model_tests scdino_training_tests"
image_configure="-DSCDINO_BUILD_TESTS=ON -DSCDINO_BUILD_BENCH=ON -DSCDINO_REQUIRE_CUDA=ON"
pack_configure="-DSCDINO_DEPS_PACK=/pack -DSCDINO_REQUIRE_CUDA=ON -DSCDINO_WITH_SERVICES=OFF -DSCDINO_BUILD_TESTS=ON"
pack_configure+=" -DSCDINO_BUILD_BENCH=ON -DSCDINO_CPU_GEMM=off -DTORCH_CUDA_ARCH_LIST=9.0"
busy() { awk '/^cpu /{print $2 + $3 + $4}' /proc/stat; }
# build NAME IMAGE TREE CONFIGURE: configure and build the targets, alone.
build() {
  local name=$1 img=$2 tree=$3 configure=$4 t0 c0 out
  mkdir -p "$tree"
  t0=$(date +%s) c0=$(busy)
  out=$("$scdino_engine" run --rm "${scdino_engine_flags[@]}" --network none -v "$src:/opt/scdino/src:ro" \
    -v "$tree:/opt/scdino/build" -v "$tmp/pack:/pack:ro" -v "$ccache_dir:/var/cache/scdino-ccache" \
    -e CCACHE_DIR=/var/cache/scdino-ccache "$img" bash -c "
      set -e
      ccache -z >/dev/null
      cmake -S /opt/scdino/src -B /opt/scdino/build -G Ninja -DCMAKE_BUILD_TYPE=Release $configure >/dev/null 2>&1
      cmake --build /opt/scdino/build --target $targets >/opt/scdino/build/build.log 2>&1 ||
        { tail -20 /opt/scdino/build/build.log >&2; exit 1; }
      ccache -s" | scdino_ccache_hits)
  printf '%-44s %5d s wall %6d CPU s  from the cache: %s of %s\n' "$name" "$(( $(date +%s) - t0 ))" \
    "$(( ($(busy) - c0) / 100 ))" $out
}
build "the image's compiling stage, empty cache" "$stage" "$tmp/image" "$image_configure"
build "then the pack's build" "$toolchain" "$tmp/pack-build" "$pack_configure"
build "the pack's build again, a new tree" "$toolchain" "$tmp/pack-build-2" "$pack_configure"
