#!/usr/bin/env bash
# Sets up scdino (scripts/setup.sh), builds the sanitizer trees
# (scripts/build-sanitized.sh) and the GPU image, and runs every test suite
# with CTest, then prints where the time went (each phase, the ten longest
# tests).
#
# Two cores do all of it, so no core may wait: the tests whose bounds are in
# seconds (Slurm, the test cluster, the live monitoring stack) mostly wait
# on Slurm and the network, and the builds that only later tests need run
# beneath them, taking only what the tests leave idle. Beneath everything,
# from the start: the GPU image (containers/Dockerfile.cuda: its packages
# first, then its compile) and, as soon as its compiling stage is tagged,
# the first contact's build from the dependency pack in its bare toolchain,
# both at the lowest CPU weight (cgroup cpu shares 2: a container build is
# out of reach of nice). The two share a compiler cache (scdino_gpu_ccache
# in containers/engine.sh): what the pack's build compiles after the
# image's and reads no header of the pack's comes from there.
# In front, the host build at full priority, then the phases the run's
# summary numbers:
#   1. Slurm and the test cluster start, the sanitizer trees start building
#      (nice 19), and the Slurm, cluster and monitoring tests run, alone;
#   2. once the sanitizer trees are built, the AddressSanitizer trainer's
#      stops on Slurm (alone too: the GPU image's build takes the core it
#      leaves);
#   3. the other tests, two at a time (the pipeline test alone), while the
#      builds beneath go on;
#   4. the sanitizer suites and the CPU image's podman tests, while the GPU
#      image's build and the pack's still go on beneath, taking what those
#      tests leave idle (a podman build installs one package at a time);
#   5. once those builds are done: the GPU image's test and the pack's, side
#      by side.
# SCDINO_SKIP_GPU_IMAGE=1 leaves the image, the pack and their tests out (a
# quick local run; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
run_start=$(date +%s)
phases=()  # "NAME SECONDS" in order

# What the long work needs, said before it starts: root (Slurm's daemons,
# network namespaces, podman's storage), and Debian's mirror (the packages,
# the images' builds, the dependency pack).
if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
  echo "scdino: the tests need root or passwordless sudo (Slurm's daemons, the test cluster's network" \
       "namespaces, podman's image storage); $(id -un) has neither" >&2
  exit 2
fi
mirror=$(sed -n 's#^\(URIs:\|deb\) *\(\[[^]]*\] *\)\{0,1\}https\{0,1\}://\([^/ ]*\).*#\3#p' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null | head -1 || true)
if [ -n "$mirror" ] && ! timeout 10 bash -c "exec 3<>/dev/tcp/$mirror/80" 2>/dev/null; then
  echo "scdino: Debian's mirror $mirror does not answer: the tests need it for the Debian packages" \
       "(scripts/install-deps.sh), the container images' builds and the GPU dependency pack" >&2
  exit 2
fi

phase_start=$(date +%s)
bash scripts/install-deps.sh
mkdir -p "$build_dir"
image_pid="" pack_pid=""
# Each run tags new test images; what the previous run's tags pointed at is
# left untagged (~10 GB for the GPU image): remove it before building again.
# shellcheck source=../containers/engine.sh
source containers/engine.sh
scdino_engine_init && scdino_prune_build_leftovers
if [ "${SCDINO_SKIP_GPU_IMAGE:-0}" != 1 ]; then
  image_log=$build_dir/gpu-image-build.log
  : > "$image_log"
  SCDINO_IMAGE_CPU_SHARES=2 bash tests/deploy/gpu_image_test.sh "$PWD" "$PWD/$build_dir" build > "$image_log" 2>&1 &
  image_pid=$!
  (
    until grep -q '^scdino: compiling stage tagged' "$image_log"; do
      kill -0 "$image_pid" 2>/dev/null ||
        { echo "scdino: the GPU image's build ended before its compile was done: no pack build beneath"; exit 1; }
      sleep 5
    done
    SCDINO_IMAGE_CPU_SHARES=2 bash tests/deploy/gpu_pack_build_test.sh "$PWD" "$PWD/$build_dir" build
  ) > "$build_dir/gpu-pack-build.log" 2>&1 &
  pack_pid=$!
fi
bash scripts/setup.sh
phases+=("packages and the host build $(( $(date +%s) - phase_start ))")
# A real single-node Slurm for the tests that submit deploy/slurm/*.sbatch,
# and the test cluster (2 nodes in network namespaces, stand-in GPUs as
# GRES) for those that run across nodes (ctest -L cluster).
phase_start=$(date +%s)
bash scripts/slurm-local.sh
bash scripts/slurm-cluster.sh start
phases+=("Slurm and the test cluster started $(( $(date +%s) - phase_start ))")
# The AddressSanitizer + UBSan and ThreadSanitizer trees beside the build.
nice -n 19 bash scripts/build-sanitized.sh > "$build_dir/sanitizers-build.log" 2>&1 &
sanitizers_pid=$!

# One intra-op thread per test process: CTest runs tests in parallel, one
# per core (nproc reports OMP_NUM_THREADS where it is set, so the cores are
# counted without it, here and in the test scripts that run suites). A test that
# fails is run once more and must then pass: a failure that repeats fails
# the run, one that does not is still shown in the log.
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The services' heap in transparent huge pages, as deploy/slurm/lib.sh
# sets it for a job's steps (docs/performance.md, "The services' heap in
# huge pages"); a GLIBC_TUNABLES that names glibc.malloc.hugetlb is kept.
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac
failed=()
n=0
run_tests() {  # PHASE CTEST-SELECTION...
  local phase=$1 start
  shift
  n=$((n + 1))
  start=$(date +%s)
  echo "scdino: tests, $phase"
  (cd "$build_dir" && ctest --output-on-failure --parallel "$jobs" --repeat until-pass:2 --timeout 900 "$@") \
    2>&1 | tee "$build_dir/test-phase-$n.log" || failed+=("$phase")
  phases+=("$n. $phase $(( $(date +%s) - start ))")
}
# timing_table: each phase and the ten longest tests, from the phases' logs.
timing_table() {
  echo
  echo "scdino: where the time went ($(( $(date +%s) - run_start )) s in all)"
  printf '  %6s s  %s\n' "$(( $(date +%s) - run_start ))" "the whole run"
  local p
  for p in "${phases[@]}"; do printf '  %6s s  %s\n' "${p##* }" "${p% *}"; done
  echo "  the ten longest tests:"
  cat "$build_dir"/test-phase-*.log 2>/dev/null |
    sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) [. ]*\(\**[A-Za-z ]*\) *\([0-9.]*\) sec$/\3 \1 \2/p' |
    sort -rn | awk 'NR <= 10 { printf "  %8.1f s  %s (%s)\n", $1, $2, $3 }'
}
# The run's own status, whatever the table's pipeline returns: `head`
# closing the pipe early gave sort a SIGPIPE (141) under pipefail, and a
# green run exited 141.
trap 'status=$?; timing_table || true; exit $status' EXIT
run_tests "bounded in seconds (Slurm, the test cluster, live monitoring)" \
  -L 'slurm|cluster|monitoring' -LE 'sanitizers|container'
# The builds beneath: a failed one is reported by its tests, which say why.
phase_start=$(date +%s)
wait "$sanitizers_pid" && echo "scdino: sanitizer trees built ($build_dir/sanitizers-build.log)" ||
  { echo "scdino: building the sanitizer trees failed:"; tail -30 "$build_dir/sanitizers-build.log"; }
phases+=("waiting for the sanitizer trees $(( $(date +%s) - phase_start ))")
stop_asan='^sanitizers\.AddressStopAndRequeueOnSlurm$'
run_tests "the AddressSanitizer trainer's stops on Slurm" -R "$stop_asan"
run_tests "the others but the sanitizer and container suites" \
  -LE 'cluster|monitoring|sanitizers|container' -E '^slurm\.'
run_tests "the sanitizer suites and the CPU image" -L 'sanitizers|container' -LE gpu-image -E "$stop_asan"
if [ -n "$image_pid" ]; then
  phase_start=$(date +%s)
  wait "$image_pid" && echo "scdino: GPU image built: $(grep '^scdino: built' "$image_log")" ||
    { echo "scdino: the GPU image's build failed ($image_log); its test repeats it:"; tail -15 "$image_log"; }
  wait "$pack_pid" && echo "scdino: the dependency pack's build done ($build_dir/gpu-pack-build.log)" ||
    { echo "scdino: the dependency pack's build failed ($build_dir/gpu-pack-build.log); its test repeats it:"
      tail -15 "$build_dir/gpu-pack-build.log"; }
  phases+=("waiting for the GPU image and the pack $(( $(date +%s) - phase_start ))")
  run_tests "the GPU image and the dependency pack" -L gpu-image
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'scdino: tests failed in: %s\n' "${failed[@]}"
  exit 1
fi
echo "scdino: every test passed"
