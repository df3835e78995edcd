#!/usr/bin/env bash
# scripts/gpu-check.sh (scdino-gpu-check in the images) on this CPU-only
# build: --rehearse runs every one of its steps (scdino-synth's cells, its
# config through scdino-config check, the training and its figures, the
# features) on the CPU, so the script works the day it meets a GPU; without
# it, the check refuses a build without CUDA by name instead of passing.
#   tests/deploy/gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" gpu-check "$1" "$2"
GPU_CHECK_OUT="$work/rehearse" bash "$src/scripts/gpu-check.sh" --bin-dir "$build/services" --rehearse \
  >"$work/rehearse.out" 2>&1 || { cat "$work/rehearse.out"; echo "FAIL: gpu-check --rehearse failed"; exit 1; }
cat "$work/rehearse.out"
grep -q "^gpu-check: training: .* images/s on 1 CPU rank(s)" "$work/rehearse.out" || echo "FAIL: no training figures"
grep -q "^gpu-check: features: 40 images in" "$work/rehearse.out" || echo "FAIL: no features figures"
grep -q "^gpu-check: passed" "$work/rehearse.out" || echo "FAIL: the rehearsal did not pass"
if GPU_CHECK_OUT="$work/gpu" bash "$src/scripts/gpu-check.sh" --bin-dir "$build/services" >"$work/gpu.out" 2>&1; then
  echo "FAIL: gpu-check passed on a build without CUDA"
fi
grep -q "gpu-check: FAILED: this scdino-trainer is built without CUDA" "$work/gpu.out" ||
  { cat "$work/gpu.out"; echo "FAIL: gpu-check did not name the missing CUDA"; }
echo "ok: gpu-check rehearsed on the CPU; refuses a build without CUDA"
