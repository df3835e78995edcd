#!/usr/bin/env bash
# Sets up scdino (scripts/setup.sh), builds the sanitizer trees
# (scripts/build-sanitized.sh) and the GPU image, and runs every test suite
# with CTest.
#
# Two cores do all of it, so no core may wait: the tests whose bounds are in
# seconds (Slurm, the test cluster, the live monitoring stack) mostly wait
# on Slurm and the network, and the builds that only later tests need run
# beneath them at the lowest priority (nice 19), which takes only what those
# tests leave idle:
#   1. the GPU image (containers/Dockerfile.cuda) starts at once, niced; the
#      host build runs at full priority;
#   2. Slurm and the test cluster start, the sanitizer trees start building
#      (niced), and the Slurm, cluster and monitoring tests run, alone;
#   3. the other tests, two at a time (the pipeline test alone), while the
#      niced builds go on;
#   4. once both builds are done: the sanitizer suites, and the podman tests
#      one at a time (the CPU image's and the GPU image's: a podman build
#      beside the GPU image's build waited on the store they share).
# SCDINO_SKIP_GPU_IMAGE=1 leaves the image and its test out (a quick local
# run; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
bash scripts/install-deps.sh
mkdir -p "$build_dir"
image_pid=""
# Each run tags new test images; what the previous run's tags pointed at is
# left untagged (~10 GB for the GPU image): remove it before building again.
# shellcheck source=../containers/engine.sh
source containers/engine.sh
scdino_engine_init && scdino_prune_build_leftovers
if [ "${SCDINO_SKIP_GPU_IMAGE:-0}" != 1 ]; then
  nice -n 19 bash tests/deploy/gpu_image_test.sh "$PWD" "$PWD/$build_dir" build > "$build_dir/gpu-image-build.log" 2>&1 &
  image_pid=$!
fi
bash scripts/setup.sh
# A real single-node Slurm for the tests that submit deploy/slurm/*.sbatch,
# and the test cluster (2 nodes in network namespaces, stand-in GPUs as
# GRES) for those that run across nodes (ctest -L cluster).
bash scripts/slurm-local.sh
bash scripts/slurm-cluster.sh start
# The AddressSanitizer + UBSan and ThreadSanitizer trees beside the build.
nice -n 19 bash scripts/build-sanitized.sh > "$build_dir/sanitizers-build.log" 2>&1 &
sanitizers_pid=$!

# One intra-op thread per test process: CTest runs tests in parallel
# (counted first: nproc reports OMP_NUM_THREADS once it is set). A test that
# fails is run once more and must then pass: a failure that repeats fails
# the run, one that does not is still shown in the log.
jobs=$(nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
failed=()
run_tests() {  # PHASE CTEST-SELECTION...
  local phase=$1
  shift
  echo "scdino: tests, $phase"
  (cd "$build_dir" && ctest --output-on-failure --parallel "$jobs" --repeat until-pass:2 --timeout 900 "$@") ||
    failed+=("$phase")
}
run_tests "bounded in seconds (Slurm, the test cluster, live monitoring)" \
  -L 'slurm|cluster|monitoring' -LE 'sanitizers|container'
run_tests "the others but the sanitizer and container suites" \
  -LE 'cluster|monitoring|sanitizers|container' -E '^slurm\.'
# The builds beneath: a failed one is reported by its tests, which say why.
wait "$sanitizers_pid" && echo "scdino: sanitizer trees built ($build_dir/sanitizers-build.log)" ||
  { echo "scdino: building the sanitizer trees failed:"; tail -30 "$build_dir/sanitizers-build.log"; }
if [ -n "$image_pid" ]; then
  wait "$image_pid" && echo "scdino: GPU image built: $(grep '^scdino: built' "$build_dir/gpu-image-build.log")" ||
    { echo "scdino: the GPU image build failed ($build_dir/gpu-image-build.log); the gpu-image test repeats it:"
      tail -15 "$build_dir/gpu-image-build.log"; }
  run_tests "the sanitizer suites and the container images" -L 'sanitizers|container'
else
  run_tests "the sanitizer suites and the CPU image" -L 'sanitizers|container' -LE gpu-image
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'scdino: tests failed in: %s\n' "${failed[@]}"
  exit 1
fi
echo "scdino: every test passed"
