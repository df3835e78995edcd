#!/usr/bin/env bash
# Sets up scdino (scripts/setup.sh) and runs every test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A real single-node Slurm for the tests that submit deploy/slurm/*.sbatch.
bash scripts/slurm-local.sh
build_dir=${BUILD_DIR:-build}
# One intra-op thread per test process: CTest already runs tests in parallel.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$build_dir"
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
