#!/usr/bin/env bash
# The main job end to end on an embedded default: sets up scdino, then trains
# a small DINO ViT on a generated data set of synthetic 5-channel cells on
# the CPU (configs/example.yaml), and says where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
config=${1:-configs/example.yaml}
# Idle OpenMP threads sleep instead of spinning against OpenBLAS's threads
# (measured ~1.6x faster on 2 cores, see docs/performance.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
"$build_dir/services/trainer/scdino-trainer" --config "$config"
run_dir=$(awk '/^ *output_dir:/{gsub(/"/,"",$2); o=$2} /^ *name_of_run:/{gsub(/"/,"",$2); n=$2} END{print o"/"n}' "$config")
echo
echo "Results in $run_dir:"
echo "  log.jsonl                  one JSON line per epoch (loss, lr, wd, momentum, teacher temperature, images/s)"
echo "  checkpoint.safetensors     latest checkpoint (student, teacher, center, optimiser; reference DINO names)"
ls -1 "$run_dir" | grep -E '^checkpoint[0-9]{4}' | sed 's/^/  /'
