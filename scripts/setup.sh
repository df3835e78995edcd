#!/usr/bin/env bash
# Sets up scdino on a fresh Debian 12 machine: installs the Debian packages
# it builds with, then configures and builds it in Release with Ninja and
# ccache. Idempotent; when nothing changed it returns in a few seconds.
#
#   bash scripts/setup.sh                 # everything into ./build
#   bash scripts/setup.sh TARGET...       # only these CMake targets
#   BUILD_DIR=/tmp/b bash scripts/setup.sh
#
# scripts/run-example.sh builds only the programs it runs (a newcomer's
# first result comes sooner); scripts/test.sh builds everything, the test
# suites and benchmarks too, after installing what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh build

build_dir=${BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SCDINO_CMAKE_ARGS:-}
fi
# Two parallel jobs fit the 2-core, 24 GiB build machines (a LibTorch
# translation unit needs ~1.5 GiB).
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" --parallel "${SCDINO_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
