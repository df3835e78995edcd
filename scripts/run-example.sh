#!/usr/bin/env bash
# The main job end to end on an embedded default: sets up scdino, generates a
# data set of synthetic 5-channel cells as TIFF files in class folders,
# computes the channel statistics, trains a small DINO ViT on the CPU
# (configs/small-data.yaml), extracts the CLS features of every checkpoint and of
# a randomly initialised ViT (the baseline), evaluates them with weighted kNN,
# and says where the results and plots are.
#
#   bash scripts/run-example.sh [CONFIG]
# SCDINO_SKIP_SETUP=1 skips scripts/setup.sh (the tests run it on a build
# they made already).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# Where the time goes: one line per stage at the end.
stages=()
t=$(date +%s)
stage() { local now; now=$(date +%s); stages+=("$(printf '%6d s  %s' $((now - t)) "$1")"); t=$now; }
# Only the programs below are built (the test suites and benchmarks are
# scripts/test.sh's).
if [ "${SCDINO_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/install-deps.sh build
  stage "Debian packages (scripts/install-deps.sh build)"
  bash scripts/setup.sh scdino-synth scdino-stats scdino-trainer scdino-features scdino-eval
  stage "the build of the five programs"
fi
# The services' heap in transparent huge pages, as deploy/slurm/lib.sh
# sets it for a job's steps (docs/performance.md, "The services' heap in
# huge pages"); a GLIBC_TUNABLES that names glibc.malloc.hugetlb is kept.
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac
build_dir=${BUILD_DIR:-build}
config=${1:-configs/small-data.yaml}
key() { awk -v k="$1" '$1 == k":" {v=$2; gsub(/"/, "", v); print v; exit}' "$config"; }
run_dir="$(key output_dir)/$(key name_of_run)"
data_dir=$(key dataset_dir)
if [ ! -d "$data_dir" ]; then
  # Difficulty 0.6: shapes and channel levels overlap between classes and the
  # cells vary in size, position, brightness and noise, so that a random ViT
  # is far from perfect and training has something to show (docs/eval.md).
  "$build_dir/services/tools/scdino-synth" --out "$data_dir" --classes 4 --per-class 128 --channels 5 \
      --size 50 --seed 7 --difficulty 0.6
fi
"$build_dir/services/tools/scdino-stats" --config "$config" > /dev/null
stage "the data set and its channel statistics"
"$build_dir/services/trainer/scdino-trainer" --config "$config"
stage "training"
"$build_dir/services/features/scdino-features" --config "$config" --all-checkpoints --random-init --raw-pixels
stage "features of every checkpoint and the baselines"
"$build_dir/services/eval/scdino-eval" --config "$config"
stage "evaluation and the report"
echo
echo "Results in $run_dir:"
echo "  log.jsonl                  one JSON line per epoch (loss, lr, wd, momentum, teacher temperature, images/s)"
echo "  checkpoint.safetensors     latest checkpoint (student, teacher, center, optimiser; reference DINO names)"
echo "  crops_preview.png          one image and the crops the recipe makes of it (one row per channel)"
echo "  channel_stats.json         each channel's mean, std and intensity histogram"
echo "  features/<checkpoint>/     CLS features (features.npy, index.csv, metadata.json, features.h5ad)"
echo "  eval/<checkpoint>/         kNN results (knn_results.json/.csv, per_class.csv, confusion_matrix.csv)"
echo "                             and plots (confusion_matrix.png, pca.png, tsne.png, umap.png, attention/*.png)"
echo "  eval/knn_per_checkpoint.csv  kNN accuracy of every checkpoint and of the baselines (random init, raw pixels)"
echo "  eval/probes_per_checkpoint.csv  linear probe and k-means (ARI, NMI) of every checkpoint"
echo "  eval/report.html           the report: curves over checkpoints, UMAP by class and cluster, confusion"
echo "                             matrices, attention maps, training health, channel histograms, the crop preview"
echo
echo "Where the time went ($(( $(date +%s) - started )) s in all):"
printf '%s\n' "${stages[@]}"
