#!/usr/bin/env bash
# Learning that holds on data the recipe was not tuned on, as a user meets
# it with the real binaries (docs/training.md):
# 1. scdino.recipe: auto on a held-out shape (24 px, 3 channels, 3 classes):
#    the derived recipe printed and kept in recipe.json, a learning check at
#    each numbered checkpoint against a random ViT and the raw pixels, a run
#    that ends healthy and beats a random ViT, one verdict line that is the
#    numbers' (learned only above both baselines);
#    scdino-features applies recipe.json (the model and the crop size it
#    trained with), for the checkpoint and for --random-init.
# 2. scdino.on_collapse: recover on a config that collapses (DINO's center
#    with a sharp teacher on small data): rolled back to the start with
#    safer settings, said in the log, the log lines and the checkpoint.
# 3. A run that made its features worse than a random ViT's (a 10x lr)
#    ends with exit code 7 and says it did not learn.
# 4. Bad input: fewer images than a global batch, images smaller than the
#    crops, a recipe key of the wrong type: exit 2 naming the numbers.
#   tests/deploy/learning_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" learning "$1" "$2"
trainer="$build/services/trainer/scdino-trainer"
features="$build/services/features/scdino-features"
synth="$build/services/tools/scdino-synth"
"$synth" --out "$work/cells24" --classes 3 --per-class 64 --channels 3 --size 24 --seed 5 --difficulty 0.6 2> /dev/null
"$synth" --out "$work/example" --classes 4 --per-class 128 --channels 5 --size 50 --seed 7 --difficulty 0.6 2> /dev/null

config() {  # config NAME DATA CHANNELS SCDINO_KEYS [TRAIN_KEYS]
  cat > "$work/$1.yaml" <<YAML
meta:
  name_of_run: "$1"
  output_dir: "$work/runs"
  dataset_dir: "$work/$2"
  seed: 40
  selected_channel_combination_per_run: ["$3"]
train_scDINO:
  batch_size_per_gpu: 32
  num_workers: 2
  ${5:-}
scdino:
  device: cpu
  threads: 1
  cache_images: true
  metrics: {enabled: false}
  $4
YAML
}

# 1. recipe: auto.
config auto cells24 012 "recipe: auto
  on_collapse: recover"
rc=0
"$trainer" --config "$work/auto.yaml" > "$work/auto.out" 2> "$work/auto.err" || rc=$?
[ "$rc" = 0 ] || { echo "FAIL: recipe auto ended with exit $rc"; cat "$work/auto.err"; exit 1; }
grep -q "recipe auto for 192 images of 24 x 24 px, 3 channels, global batch 32" "$work/auto.err" ||
  { echo "FAIL: the derived recipe is not printed"; cat "$work/auto.err"; exit 1; }
grep -q "train_scDINO.hyperparameters.patch_size: 4 (images of 24 px: 6 x 6 tokens" "$work/auto.err" ||
  { echo "FAIL: no patch 4 for 24 px images"; cat "$work/auto.err"; exit 1; }
# Cells lie every which way: the flips stay, measured on the images.
for f in "hflip_p: 0.5 (flipped left-right" "vflip_p: 0.5 (flipped up-down"; do
  grep -q "scdino.augmentation.$f, an image is [01]\.[0-9][0-9] x as far from its nearest image of the set as unflipped (median; measured on 192 images; below 1.10" "$work/auto.err" ||
    { echo "FAIL: no measured $f"; grep -E "flip|recipe" "$work/auto.err"; exit 1; }
done
$py - "$work/runs/auto" <<'PY' || { cat "$work/auto.err"; exit 1; }
import json, sys
run = sys.argv[1]
recipe = {v["key"]: v["value"] for v in json.load(open(run + "/recipe.json"))["values"]}
assert recipe["train_scDINO.hyperparameters.global_crops_size"] == "24", recipe
assert recipe["train_scDINO.hyperparameters.local_crops_size"] == "12", recipe
epochs = int(recipe["train_scDINO.epochs"])
lines = [json.loads(l) for l in open(run + "/log.jsonl")]
assert len(lines) == epochs, ("FAIL: %d epoch lines, the recipe says %d epochs" % (len(lines), epochs))
checks = [l for l in lines if "knn_top1" in l]
assert len(checks) >= 4, "FAIL: %d learning checks, expected one per numbered checkpoint" % len(checks)
last = lines[-1]
assert last["collapse"] == "healthy", "FAIL: the run ends %s" % last["collapse"]
assert last["knn_top1"] > last["knn_random_top1"], "FAIL: learning check %s" % last
# The raw pixels are the other baseline; the verdict is the numbers'.
assert 0 <= last["knn_pixels_top1"] <= 1, last
above = last["knn_top1"] > last["knn_random_top1"] and last["knn_top1"] > last["knn_pixels_top1"]
expected = "learned" if above else "did_not_learn"
assert last["learning_verdict"] == expected, "FAIL: verdict %s for %s" % (last["learning_verdict"], last)
open(run + "/verdict", "w").write(expected)
print("ok: recipe auto: %d epochs, ends healthy, 20-NN top-1 %.3f against %.3f for a random ViT and %.3f for "
      "the raw pixels: %s" % (epochs, last["knn_top1"], last["knn_random_top1"], last["knn_pixels_top1"], expected))
PY
# One verdict line at the end, the log's, and nothing contradicting it.
verdicts=$(grep -c -E "^scdino-trainer: (learned|did not learn|cannot tell whether it learned): " "$work/auto.err" || true)
[ "$verdicts" = 1 ] || { echo "FAIL: $verdicts verdict lines at the end, expected 1"; tail -5 "$work/auto.err"; exit 1; }
case $(cat "$work/runs/auto/verdict") in
  learned) want="scdino-trainer: learned: 20-NN top-1 on 39 held-out images: the teacher " ;;
  *) want="scdino-trainer: did not learn: the trained teacher's features are no better than" ;;
esac
grep -qF "$want" "$work/auto.err" || { echo "FAIL: the end of the run does not say '$want'"; tail -3 "$work/auto.err"; exit 1; }
grep -q "baselines: a random ViT and the raw pixels (24 px as the features, per-channel normalised)" "$work/auto.err" ||
  { echo "FAIL: the learning check does not say how it prepares the raw pixels"; grep "learning check" "$work/auto.err"; exit 1; }
"$features" --config "$work/auto.yaml" --random-init > "$work/features.out" 2>&1 ||
  { echo "FAIL: scdino-features on a recipe auto run"; cat "$work/features.out"; exit 1; }
$py - "$work/runs/auto/features" <<'PY' || exit 1
import json, sys, glob
for meta in sorted(glob.glob(sys.argv[1] + "/*/metadata.json")):
    m = json.load(open(meta))
    assert m["preprocessing"]["resize"] == 24, "FAIL: %s: resize %s, the recipe trained at 24" % (meta, m["preprocessing"]["resize"])
print("ok: scdino-features applies recipe.json (resize 24, checkpoint and random ViT)")
PY

# 2. on_collapse: recover on a config that collapses one-hot in its first epochs.
collapsing="hyperparameters: {arch: vit_tiny, depth: 6, patch_size: 8, global_crops_size: 48, local_crops_size: 24,
    local_crops_number: 4, out_dim: 256, lr: 0.015, warmup_epochs: 2, momentum_teacher: 0.97, teacher_temp: 0.02,
    warmup_teacher_temp: 0.02, global_crops_scale: [0.4, 1.0], local_crops_scale: [0.15, 0.4]}
  epochs: 4
  saveckp_freq: 2"
config recover example 01234 "on_collapse: recover
  teacher_centering: center" "$collapsing"
rc=0
"$trainer" --config "$work/recover.yaml" > "$work/recover.out" 2> "$work/recover.err" || rc=$?
grep -q "scdino-trainer: recovering from onehot_collapse at iteration .* (1 of at most 2, scdino.on_collapse: recover): back to iteration 0, the initial weights" "$work/recover.err" ||
  { echo "FAIL: no recovery from the collapse"; cat "$work/recover.err"; exit 1; }
grep -q "scdino.teacher_centering: sinkhorn_knopp (equipartition" "$work/recover.err" ||
  { echo "FAIL: the recovery does not say what it changed"; cat "$work/recover.err"; exit 1; }
[ "$rc" = 0 ] || [ "$rc" = 7 ] || { echo "FAIL: the recovered run ended with exit $rc"; cat "$work/recover.err"; exit 1; }
$py - "$work/runs/recover" <<'PY' || { cat "$work/recover.err"; exit 1; }
import json, struct, sys
run = sys.argv[1]
lines = [json.loads(l) for l in open(run + "/log.jsonl")]
assert lines[-1].get("recoveries") == 1, "FAIL: last log line %s" % lines[-1]
assert lines[-1]["collapse"] == "healthy", "FAIL: the recovered run ends %s" % lines[-1]["collapse"]
b = open(run + "/checkpoint.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
rec = json.loads(json.loads(b[8:8 + n])["__metadata__"]["recoveries"])
keys = {s["key"]: s["value"] for s in rec["settings"]}
assert rec["count"] == 1 and keys["scdino.teacher_centering"] == "sinkhorn_knopp", rec
print("ok: on_collapse recover: rolled back once, ends healthy, the checkpoint keeps the settings")
PY

# 3. A 10x lr makes the features worse than a random ViT's: exit 7.
config worse example 01234 "on_collapse: warn
  learning_check: require
  teacher_centering: center" "${collapsing/lr: 0.015/lr: 0.15}"
rc=0
"$trainer" --config "$work/worse.yaml" > "$work/worse.out" 2> "$work/worse.err" || rc=$?
[ "$rc" = 7 ] || { echo "FAIL: a run worse than a random ViT ended with exit $rc, expected 7"; tail -5 "$work/worse.err"; exit 1; }
grep -q "scdino-trainer: did not learn: the trained teacher's features are no better than " "$work/worse.err" ||
  { echo "FAIL: no plain 'did not learn'"; tail -3 "$work/worse.err"; exit 1; }
echo "ok: a run worse than a random ViT: exit 7, $(grep -o 'did not learn.*' "$work/worse.err" | head -1 | cut -c1-120)"

# 4. Bad input, each named with its numbers.
expect_bad() {  # expect_bad NAME MESSAGE
  local rc=0
  "$trainer" --config "$work/$1.yaml" > /dev/null 2> "$work/$1.err" || rc=$?
  [ "$rc" = 2 ] || { echo "FAIL: $1: exit $rc, expected 2"; cat "$work/$1.err"; exit 1; }
  grep -qF "$2" "$work/$1.err" || { echo "FAIL: $1: the error does not say '$2'"; cat "$work/$1.err"; exit 1; }
  echo "ok: $1: $(grep -o 'scdino-trainer: .*' "$work/$1.err" | tail -1 | cut -c1-160)"
}
config small_set cells24 012 "recipe: auto" "batch_size_per_gpu: 256"
sed -i '/batch_size_per_gpu: 32/d' "$work/small_set.yaml"
expect_bad small_set "192 images, fewer than one global batch of 256"
config small_images cells24 012 "recipe: manual" "hyperparameters: {patch_size: 8, global_crops_size: 48, local_crops_size: 32}"
expect_bad small_images "the images are 24 x 24 px, smaller than the local crops (32 px"
config wrong_type cells24 012 "recipe: [auto]"
expect_bad wrong_type "scdino.recipe: expected"
echo "ok: learning checks"
