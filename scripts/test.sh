#!/usr/bin/env bash
# Sets up scdino (scripts/setup.sh), builds the sanitizer trees
# (scripts/build-sanitized.sh) and runs every test suite with CTest.
#
# The GPU image (containers/Dockerfile.cuda: its packages, then a second
# compile against LibTorch 2.6) is built beside the host build: its package
# installation is I/O-bound and overlaps the compile, and the gpu-image test
# then finds it in podman's build cache. SCDINO_SKIP_GPU_IMAGE=1 leaves the
# image and its test out (a quick local run; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
bash scripts/install-deps.sh
exclude=()
image_pid=""
# Each run tags new test images; what the previous run's tags pointed at is
# left untagged (~10 GB for the GPU image): remove it before building again.
# shellcheck source=../containers/engine.sh
source containers/engine.sh
scdino_engine_init && scdino_prune_build_leftovers
if [ "${SCDINO_SKIP_GPU_IMAGE:-0}" = 1 ]; then
  exclude=(-LE gpu-image)
else
  mkdir -p "$build_dir"
  bash tests/deploy/gpu_image_test.sh "$PWD" "$PWD/$build_dir" build > "$build_dir/gpu-image-build.log" 2>&1 &
  image_pid=$!
fi
bash scripts/setup.sh
# The AddressSanitizer + UBSan and ThreadSanitizer trees beside the build
# (ctest -L sanitizers runs their tests).
bash scripts/build-sanitized.sh
# A real single-node Slurm for the tests that submit deploy/slurm/*.sbatch,
# and the test cluster (2 nodes in network namespaces, stand-in GPUs as
# GRES) for those that run across nodes (ctest -L cluster).
bash scripts/slurm-local.sh
bash scripts/slurm-cluster.sh start
if [ -n "$image_pid" ]; then
  wait "$image_pid" && echo "scdino: GPU image built: $(grep '^scdino: built' "$build_dir/gpu-image-build.log")" ||
    echo "scdino: the GPU image build failed ($build_dir/gpu-image-build.log); the gpu-image test repeats it and says why"
fi
# One intra-op thread per test process: CTest already runs tests in parallel
# (counted first: nproc reports OMP_NUM_THREADS once it is set). The Slurm,
# cluster and live-monitoring tests run alone (RUN_SERIAL: their bounds are
# in seconds), the podman tests one at a time (RESOURCE_LOCK podman); the
# others two at a time. A test that fails is run once
# more and must then pass: a failure that repeats fails the run, one that
# does not is still shown in the log.
jobs=$(nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$build_dir"
ctest --output-on-failure --parallel "$jobs" --repeat until-pass:2 --timeout 900 "${exclude[@]}"
