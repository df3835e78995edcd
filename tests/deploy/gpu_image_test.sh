#!/usr/bin/env bash
# The GPU image made from Debian packages only (containers/Dockerfile.cuda:
# Debian 13, LibTorch 2.6 with CUDA 12.4 and NCCL 2.22, the cuDNN stand-in),
# built with podman and tested on this machine, which has no GPU:
#   - scripts/build-image.sh --cuda, cold or from the build cache;
#   - what the image holds: the services linked against the CUDA LibTorch,
#     no NVIDIA driver library (libcuda.so.1 is the host's, mounted at run
#     time), the cuDNN stand-in and the label that says so, InfiniBand's
#     user space (rdma-core) for NCCL; every binary starts, and --version
#     shows LibTorch 2.6, CUDA and NCCL compiled in, the stand-in and no
#     GPU; a call into the stand-in aborts naming the function;
#   - the unit tests of the layers whose code differs between LibTorch
#     versions or between CUDA and the CPU (common, data, launch: `ctest -L
#     unit` over the suites the image compiles; model's and training's run
#     from the dependency pack's build, tests/deploy/gpu_pack_build_test.sh)
#     against LibTorch 2.6, run in the image's compiling stage; the
#     benchmarks compiled;
#   - a short CPU training of the README's recipe in the runtime image with
#     scdino.device auto (no GPU: the CPU, said at start), then cuda (exit 2
#     naming the key).
#   bash tests/deploy/gpu_image_test.sh SOURCE_DIR BUILD_DIR [build]
# `build` only builds the image (scripts/test.sh starts that beside the host
# build, so that the test itself finds it in the build cache).
# Lines starting with FAIL: fail the ctest.
set -uo pipefail
# Its compile shares a compiler cache with the dependency pack's build
# (scdino_gpu_ccache).
source "$(dirname "$0")/../../containers/engine.sh"
build_image=(bash "$1/scripts/build-image.sh" --cuda --tag scdino:cuda-test --build-stage scdino:cuda-test-build
             --ccache "$(scdino_gpu_ccache)")
if [ "${3:-}" = build ]; then
  exec "${build_image[@]}"
fi
source "$(dirname "$0")/../support/lib.sh" gpu-image "$1" "$2"
scdino_engine_init || { echo "FAIL: no container engine"; exit 1; }
engine=$scdino_engine
image=localhost/scdino:cuda-test
stage=localhost/scdino:cuda-test-build
fail() { echo "FAIL: $*"; exit 1; }
run_in() {  # run_in IMAGE ARGS...: a command in IMAGE, $work mounted, host network
  local img=$1
  shift
  "$engine" run --rm "${scdino_engine_flags[@]}" --network host -v "$work:$work" -w "$work" "$img" "$@"
}

start=$(date +%s)
"${build_image[@]}" >"$work/build.out" 2>"$work/build.err" || { tail -40 "$work/build.err"; fail "build-image.sh --cuda failed"; }
cat "$work/build.out"
echo "ok: built $image in $(( $(date +%s) - start )) s"

# What the image holds.
[ "$("$engine" image inspect --format '{{index .Labels "org.scdino.cudnn"}}' "$image")" = stub ] ||
  fail "the image's label org.scdino.cudnn does not say stub"
held=$(run_in "$image" sh -c 'ls /usr/local/bin; find / -xdev -name "libcuda.so*" -not -path "/proc/*" 2>/dev/null;
  readlink -f /usr/lib/x86_64-linux-gnu/libcudnn.so.9;
  dpkg-query -W -f="\${Package} \${Version} \${db:Status-Abbrev}\n" nvidia-cudnn libtorch-cuda-2.6 libnccl2 libibverbs1 ibverbs-providers librdmacm1t64;
  cat /usr/local/share/scdino/cuda-architectures.txt; for p in gcc g++ cc nvcc cmake; do command -v $p; done;
  find /usr/local /opt -xdev \( -name "*.cc" -o -name CMakeCache.txt -o -name "scdino_*_tests" -o -name "scdino-bench-*" -o -name "*.deb" \) \
    -not -path "/proc/*" 2>/dev/null | sed "s/^/built: /" | head -5' 2>&1)
echo "$held"
for b in scdino-trainer scdino-features scdino-eval scdino-preflight scdinoctl scdino-synth scdino-stats scdino-pack scdino-config scdino-export; do
  grep -qx "$b" <<<"$held" || fail "the image lacks $b"
  v=$(run_in "$image" "$b" --version 2>&1) || fail "$b --version failed in the image: $v"
done
! grep -q "libcuda.so" <<<"$held" || fail "the image holds an NVIDIA driver library (it must come from the host)"
# The local packages are held (containers/Dockerfile.cuda's cuda-libs): an
# install that would replace the stand-in with Debian's downloader fails.
grep -q "^nvidia-cudnn 9.0.0.312~cuda12+scdino.stub hi" <<<"$held" || fail "the image's cuDNN is not the stand-in, held"
grep -q "^libtorch-cuda-2.6 2.6" <<<"$held" && grep -q "^libnccl2 2.22" <<<"$held" || fail "not LibTorch 2.6 CUDA with NCCL 2.22"
grep -q "sm_90" <<<"$held" || fail "no sm_90 (H100) code in libtorch_cuda.so"
! grep -qE "^/usr/bin/(gcc|g\+\+|cc|nvcc|cmake)$" <<<"$held" || fail "the runtime image holds a compiler or CMake"
! grep -q "^built: " <<<"$held" || fail "the runtime image holds sources, a build tree, test or benchmark programs, packages' files: $(grep "^built: " <<<"$held")"
for p in libibverbs1 ibverbs-providers librdmacm1t64; do
  grep -qE "^$p [^ ]+ ii" <<<"$held" || fail "the image lacks $p (NCCL's InfiniBand transport would fall back to sockets)"
done
# The stand-in exports what LibTorch imports so that it loads; were a call
# ever to slip past the switch, it aborts naming the function.
# (Under sh: as a container's first process, PID 1, a signal without a
# handler is ignored and abort() ends in a segmentation fault instead.)
out=$(run_in "$image" sh -c "python3 -c \"import ctypes; ctypes.CDLL('libcudnn.so.9').cudnnCreate(None)\"; exit \$?" 2>&1); rc=$?
[ "$rc" = 134 ] || fail "a call into the cuDNN stand-in exited $rc, expected 134 (abort): $out"
grep -qF "cuDNN stand-in: cudnnCreate was called" <<<"$out" || fail "the stand-in's abort does not name cudnnCreate: $out"
echo "ok: a call into the cuDNN stand-in aborts naming it"
version=$(run_in "$image" scdino-trainer --version 2>&1)
echo "$version"
for want in "LibTorch 2.6" "CUDA 12.4 compiled in" "NCCL 2.22" "cuDNN: the image's stand-in" "NVIDIA driver: none found" "GPUs visible: 0"; do
  grep -qF "$want" <<<"$version" || fail "scdino-trainer --version lacks '$want': $version"
done
run_in "$image" scdino-trainer --help >/dev/null 2>&1 || fail "scdino-trainer --help failed in the image"
echo "ok: image holds the services (LibTorch 2.6 CUDA, NCCL 2.22, cuDNN stand-in labelled, rdma-core), no driver library, no compiler"

# The unit tests against LibTorch 2.6, in the compiling stage.
shared=${SCDINO_SHARED_DIR:-$src/../shared}
"$engine" run --rm "${scdino_engine_flags[@]}" --network host -v "$(cd "$shared" && pwd):/opt/scdino/shared:ro" \
  -e SCDINO_SHARED_DIR=/opt/scdino/shared -e OMP_NUM_THREADS=1 -e OPENBLAS_NUM_THREADS=1 \
  -e SCDINO_SKIP_UNBUILT_SUITES=1 "$stage" \
  ctest --test-dir /opt/scdino/build -L unit --output-on-failure \
  --parallel "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --timeout 600 \
  >"$work/unit.out" 2>&1
rc=$?
grep -E "tests passed|tests failed|Total Test time" "$work/unit.out"
[ "$rc" = 0 ] || { grep -E "\*\*\*Failed|Failed  |Exception|Timeout" "$work/unit.out" | head -30; tail -60 "$work/unit.out"; fail "unit tests failed on LibTorch 2.6"; }
grep -q "100% tests passed" "$work/unit.out" || fail "no unit test result: $(tail -5 "$work/unit.out")"
# The suites it skips are those the stage does not compile: each one it
# compiles (the Dockerfile's TEST_SUITES) must have passed.
for suite in $(sed -n 's/^ARG TEST_SUITES="\(.*\)"$/\1/p' "$src/containers/Dockerfile.cuda"); do
  grep -qE "Test +#[0-9]+: $suite [. ]*Passed" "$work/unit.out" || fail "the compiling stage's $suite did not pass"
done
echo "ok: unit tests on LibTorch 2.6 (CUDA build, no GPU)"
benches=$("$engine" run --rm "${scdino_engine_flags[@]}" "$stage" sh -c 'ls /opt/scdino/build/bench/ | grep -c "^scdino-bench-"')
[ "$benches" = 7 ] || fail "the compiling stage holds $benches benchmarks, expected all 7 compiled against LibTorch 2.6"
echo "ok: the 7 benchmarks compiled against LibTorch 2.6"

# A short CPU training of the recipe in the runtime image.
run_in "$image" scdino-synth --out "$work/data/example" --classes 4 --per-class 16 --channels 5 --size 50 --seed 7 \
  --difficulty 0.6 >/dev/null || fail "scdino-synth in the image failed"
sed -e 's/^  device: cpu/  device: auto/' -e 's/^  epochs: 16/  epochs: 2/' "$src/configs/small-data.yaml" > "$work/auto.yaml"
grep -q "device: auto" "$work/auto.yaml" || fail "could not set scdino.device: auto"
run_in "$image" scdino-trainer --config "$work/auto.yaml" --threads 2 >"$work/train.out" 2>&1 ||
  { tail -20 "$work/train.out"; fail "a CPU training in the GPU image failed"; }
grep -qF "device cpu (scdino.device auto: no GPU visible)" "$work/train.out" || { tail -20 "$work/train.out"; fail "the trainer did not say it runs on the CPU for want of a GPU"; }
[ -s "$work/runs/example/checkpoint.safetensors" ] && [ "$(wc -l < "$work/runs/example/log.jsonl")" = 2 ] ||
  fail "no 2 epochs trained in the GPU image"
echo "ok: scdino.device auto trains on the CPU in the GPU image"
sed 's/^  device: auto/  device: cuda/' "$work/auto.yaml" > "$work/cuda.yaml"
out=$(run_in "$image" scdino-trainer --config "$work/cuda.yaml" 2>&1); rc=$?
[ "$rc" = 2 ] || fail "scdino.device cuda without a GPU exited $rc, expected 2: $out"
grep -qF "$work/cuda.yaml: scdino.device is cuda, but no GPU is visible" <<<"$out" || fail "no clear error for cuda without a GPU: $out"
echo "ok: scdino.device cuda without a GPU: exit 2 naming the key"
