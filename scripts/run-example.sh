#!/usr/bin/env bash
# The main job end to end on an embedded default: sets up scdino, generates a
# data set of synthetic 5-channel cells as TIFF files in class folders
# (data/example), computes the channel statistics, trains a small DINO ViT on
# the CPU (configs/example.yaml), and says where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
config=${1:-configs/example.yaml}
# Idle OpenMP threads sleep instead of spinning against OpenBLAS's threads
# (measured ~1.6x faster on 2 cores, see docs/performance.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
if [ ! -d data/example ]; then
  "$build_dir/services/tools/scdino-synth" --out data/example --classes 4 --per-class 128 --channels 5 \
      --size 50 --seed 7
fi
"$build_dir/services/tools/scdino-stats" --config "$config" > /dev/null
"$build_dir/services/trainer/scdino-trainer" --config "$config"
run_dir=$(awk '/^ *output_dir:/{gsub(/"/,"",$2); o=$2} /^ *name_of_run:/{gsub(/"/,"",$2); n=$2} END{print o"/"n}' "$config")
echo
echo "Results in $run_dir:"
echo "  channel_stats.json         per-channel mean and std of the training images"
echo "  classes.json               class names; index = position"
echo "  log.jsonl                  one JSON line per epoch (loss, lr, wd, momentum, teacher temperature, images/s)"
echo "  checkpoint.safetensors     latest checkpoint (student, teacher, center, optimiser; reference DINO names)"
ls -1 "$run_dir" | grep -E '^checkpoint[0-9]{4}' | sed 's/^/  /'
