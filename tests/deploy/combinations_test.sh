#!/usr/bin/env bash
# scDINO's full-pipeline YAML, in its layout and with its keys (spellings,
# python tuples, all six channel combinations: the five channels, then each
# alone), submitted with deploy/slurm/submit.sh on the test cluster (2
# nodes, 4 stand-in GPUs each): the file is as scDINO's users write it
# (tests/config/scdino_full_pipeline.yaml), with its paths pointing here,
# scDINO's default six combinations and a small synthetic data set; the model,
# schedule and CPU come from --set on the command line (two CPU cores; the
# stand-in GPUs cannot compute). Then:
#   - every combination is trained, extracted and evaluated as its own run
#     in the folder scDINO names (<dino_vit_name>_channel_<names>);
#   - combination 2's training step gets a TERM while it trains: it
#     checkpoints, its array task requeues and resumes to the end, and the
#     other five are never restarted (Restarts=0, one life in their logs);
#   - the comparison page at the run's top folder lists all six.
#   tests/deploy/combinations_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" combinations "$1" "$2"
fail() { echo "FAIL: $*"; exit 1; }
trap 'scancel ${train:-} ${evaluation:-} 2>/dev/null' EXIT
eval "$(bash "$src/scripts/slurm-cluster.sh" env)"
sinfo -h >/dev/null 2>&1 || fail "the test cluster is not running (bash scripts/slurm-cluster.sh start)"
"$build/services/tools/scdino-synth" --out "$work/data" --classes 2 --per-class 12 --channels 5 --size 16 --seed 4 \
  >/dev/null || fail "scdino-synth"

# The file as tests/config/scdino_full_pipeline.yaml holds it, with its
# paths here and the combinations scDINO's file asks for by default.
sed -e "s|^  output_dir: .*|  output_dir: \"$work/runs\"|" -e "s|^  dataset_dir: .*|  dataset_dir: \"$work/data\"|" \
    -e 's|^  selected_channel_combination_per_run: .*|  selected_channel_combination_per_run: ["01234", "0", "1", "2", "3", "4"]|' \
    -e 's|^  name_of_run: .*|  name_of_run: "sc_run"|' \
    "$src/tests/config/scdino_full_pipeline.yaml" > "$work/scDINO_full_pipeline.yaml"
grep -q '"01234", "0", "1", "2", "3", "4"' "$work/scDINO_full_pipeline.yaml" && grep -q "$work/data" "$work/scDINO_full_pipeline.yaml" ||
  fail "could not point tests/config/scdino_full_pipeline.yaml here"

# A small run for two CPU cores, on the command line.
sets=()
for kv in train_scDINO.epochs=30 train_scDINO.saveckp_freq=10 train_scDINO.batch_size_per_gpu=4 \
          train_scDINO.num_workers=1 train_scDINO.hyperparameters.warump_epochs=1 \
          train_scDINO.hyperparameters.use_fp16=False \
          downstream_analyses.compute_cls_features.batch_size_per_gpu=16 \
          downstream_analyses.compute_cls_features.num_workers=1 \
          downstream_analyses.compute_cls_features.resize_length=16 \
          "downstream_analyses.kNN.global.n_neighbors=[5, 10]" scdino.threads=1 scdino.device=cpu; do
  sets+=(--set "$kv")
done
while IFS=': ' read -r key value; do
  [ "$key" = warmup_epochs ] || sets+=(--set "train_scDINO.hyperparameters.$key=$value")
done < <($py -c 'import sys, yaml; [print(f"{k}: {v}") for k, v in yaml.safe_load(sys.argv[1]).items()]' "$TINY_HYPERPARAMETERS")

cd "$work" || fail "no $work"
export SCDINO_BUILD="$build" SCDINO_BIN="$build/services/trainer"
unset SCDINO_CONTAINER
"$src/deploy/slurm/submit.sh" scDINO_full_pipeline.yaml --nodes 1 --gpus-per-node 1 --cpus-per-gpu 1 \
  --partition cluster --time 30:00 "${sets[@]}" > submit.out 2>&1 || { cat submit.out; fail "submit.sh failed"; }
cat submit.out
train=$(sed -n 's/^scdino-submit: training: job \([0-9]*\) (array 0-5.*/\1/p' submit.out)
evaluation=$(sed -n 's/^scdino-submit: evaluation: job \([0-9]*\),.*/\1/p' submit.out)
[ -n "$train" ] && [ -n "$evaluation" ] || fail "submit.sh printed no training array of six tasks and no evaluation"

# Combination 2 (channel 1, BF): a TERM to its training step while it trains.
top="$work/runs/sc_run"
termed="$top/vit_channel_BF"
for _ in $(seq 1 600); do
  [ -s "$termed/log.jsonl" ] && break
  squeue -h -j "${train}_2" 2>/dev/null | grep -q . || fail "array task ${train}_2 ended before it logged a step"
  sleep 0.2
done
[ -s "$termed/log.jsonl" ] || fail "combination 2 logged no step in 120 s"
scancel --signal=TERM "${train}_2" || fail "scancel --signal=TERM ${train}_2"
wait_gone "$train" 600
wait_gone "$evaluation" 600

iteration() {
  $py - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
print(json.loads(b[8:8 + n])["__metadata__"]["iteration"])
PY
}
names=(AF647_BF_DAPI_CD3_PE AF647 BF DAPI CD3 PE)
want_iteration=""
for i in 0 1 2 3 4 5; do
  dir="$top/vit_channel_${names[$i]}"
  log="$work/scdino-train-${train}_$i.out"
  for job in "${train}_$i" "${evaluation}_$i"; do
    state=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1)
    [ "$state" = JobState=COMPLETED ] || { cat "$log" "$work/scdino-evaluate-${evaluation}_$i.out" 2>/dev/null; fail "job $job: ${state:-unknown to Slurm}"; }
  done
  [ -f "$dir/checkpoint.safetensors" ] && [ -s "$dir/eval/report.html" ] && [ -s "$dir/eval/knn_per_checkpoint.csv" ] ||
    fail "combination $i (${names[$i]}): no checkpoint or evaluation in $dir: $(ls "$dir" 2>&1)"
  it=$(iteration "$dir/checkpoint.safetensors")
  [ -z "$want_iteration" ] || [ "$it" = "$want_iteration" ] ||
    fail "combination $i ended at iteration $it, combination 0 at $want_iteration"
  want_iteration=$it
  restarts=$(scontrol show job -o "${train}_$i" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
  # One life: the iterations of its log never start again.
  lives=$($py - "$dir/log.jsonl" <<'PY'
import json, sys
its = [json.loads(l)["iteration"] for l in open(sys.argv[1])]
print(1 + sum(1 for a, b in zip(its, its[1:]) if b <= a))
PY
)
  if [ "$i" = 2 ]; then
    [ "$restarts" = 1 ] && grep -q "requeueing job" "$log" && grep -q "scdino-trainer: resum" "$log" ||
      { cat "$log"; fail "combination 2 after its TERM: Restarts=$restarts, expected a requeue and a resume"; }
  else
    [ "$restarts" = 0 ] && [ "$lives" = 1 ] && ! grep -q "requeueing job" "$log" ||
      { cat "$log"; fail "combination $i was touched by combination 2's TERM: Restarts=$restarts, $lives lives in its log"; }
  fi
done
for i in 0 1 2 3 4 5; do
  grep -q "vit_channel_${names[$i]}" "$top/report.html" || fail "the comparison page $top/report.html lacks combination ${names[$i]}"
done
echo "ok: scDINO's full-pipeline YAML: six combinations trained (iteration $want_iteration each), evaluated and compared;" \
     "combination 2 resumed after a TERM, the other five never restarted"
