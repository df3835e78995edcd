#!/usr/bin/env bash
# Builds the sanitizer trees that the test command runs beside the normal
# build (docs/architecture.md#sanitizers), each in its own directory next to
# BUILD_DIR (default build):
#
#   BUILD_DIR-asan  AddressSanitizer + UndefinedBehaviorSanitizer: the suites
#                   of the code that parses what it reads, owns threads and
#                   processes, or stops (common, data, run, runtime, control,
#                   training, trainer, follower), scdino-trainer (the
#                   Slurm stop test runs it) and scdino-fuzz-replay (the
#                   fuzz corpora and crash inputs); not model, eval, features,
#                   preflight, metrics: numeric kernels over tensors, whose
#                   tests take minutes under ASan and whose memory LibTorch
#                   owns
#   BUILD_DIR-tsan  ThreadSanitizer: one suite, scdino_thread_tests, of the
#                   tests whose code starts threads of its own (the loader,
#                   the control server, the checkpoint follower, the metrics
#                   exporter, the stop signals and the shutdown;
#                   tests/sanitizers/CMakeLists.txt)
#
#   bash scripts/build-sanitized.sh              # both
#   bash scripts/build-sanitized.sh address      # one of address, thread
#
# Benchmarks and the other programs are left out: nothing runs them under a
# sanitizer, and on two cores every target costs the test run minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh build
build_dir=${BUILD_DIR:-build}
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
for kind in "${kinds[@]}"; do
  case $kind in
    address)
      dir="$build_dir-asan" sanitize=address,undefined
      targets=(scdino_common_tests scdino_data_tests scdino_run_tests scdino_config_tests scdino_launch_tests scdino_plan_tests
               scdino_training_tests scdino_process_tests
               scdino_control_tests scdino_trainer_tests scdino_follower_tests scdino-trainer scdino-fuzz-replay) ;;
    thread)
      dir="$build_dir-tsan" sanitize=thread
      targets=(scdino_thread_tests) ;;
    *) echo "scdino: build-sanitized.sh: unknown kind '$kind' (expected address or thread)" >&2; exit 2 ;;
  esac
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCDINO_SANITIZE="$sanitize" -DSCDINO_BUILD_BENCH=OFF \
      ${SCDINO_CMAKE_ARGS:-} > /dev/null
  fi
  args=()
  for t in "${targets[@]}"; do args+=(--target "$t"); done
  echo "scdino: building $dir (sanitizers $sanitize): ${targets[*]}"
  cmake --build "$dir" --parallel "${SCDINO_BUILD_JOBS:-$(nproc)}" "${args[@]}"
done
