#!/usr/bin/env bash
# Submits deploy/slurm/*.sbatch to the real single-node Slurm started by
# scripts/slurm-local.sh: a 2-task data-parallel run, then a run sent
# `scancel --signal=USR1` mid-way, which must checkpoint, requeue itself,
# resume and finish with the weights of an uninterrupted run; a plain
# `scancel`, which must cancel (no requeue); a requeue that fails, which
# must fail the job; scdinoctl
# against a Slurm-launched trainer; and evaluate.sbatch's features on 2 tasks
# followed by the evaluation.
#   tests/deploy/slurm_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" slurm "$1" "$2"
if ! sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated'; then
  echo "FAIL: no Slurm cluster (scripts/slurm-local.sh starts one)"
  exit 1
fi

config() {  # name epochs
  cat > "$work/$1.yaml" <<YAML
meta: {name_of_run: "$1", output_dir: "$work", seed: 5, selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: $2
  saveckp_freq: 100
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino: {threads: 1, data_source: synthetic, synthetic: {classes: 2, per_class: 8, channels: 3, size: 16, seed: 1}}
YAML
}

submit() {  # name ntasks [scdino-trainer flags] -> job id
  local name=$1 ntasks=$2
  shift 2
  sbatch --parsable --ntasks="$ntasks" --cpus-per-task=1 --output="$work/$name-%j.out" \
    --export=ALL,SCDINO_BIN="$build/services/trainer" "$src/deploy/slurm/train.sbatch" "$work/$name.yaml" "$@"
}

iteration() { python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
print(json.loads(b[8:8 + n])['__metadata__']['iteration'])
PY
}

same_weights() { python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]: 8 + n + v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if not k.startswith('optimizer.') and a[k] != b.get(k)]
print('identical' if not bad else 'differ: ' + ', '.join(bad[:5]))
PY
}

# 1. Two tasks, data parallel over Gloo, rendezvous from Slurm's variables;
# the file says 5 epochs, the command line sets 2 (the preflight and the
# trainer both take it), and the checkpoint records what the run was given.
config two 5
job=$(submit two 2 --set train_scDINO.epochs=2 --set=train_scDINO.saveckp_freq=50)
wait_gone "$job" 300
grep -q "rank 1 of 2, gloo (slurm launch" "$work"/two-*.out || { echo "FAIL: no 2-rank launch"; cat "$work"/two-*.out; exit 1; }
[ "$(iteration "$work/two/checkpoint.safetensors")" = 4 ] || { echo "FAIL: 2-task run did not finish"; cat "$work"/two-*.out; exit 1; }
[ "$(wc -l < "$work/two/log.jsonl")" = 2 ] || { echo "FAIL: expected 2 log lines"; exit 1; }
recorded=$(python3 - "$work/two/checkpoint.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
print(json.loads(b[8:8 + n])['__metadata__']['config'].splitlines()[0])
PY
)
[ "$recorded" = "# $work/two.yaml --set train_scDINO.epochs=2 --set train_scDINO.saveckp_freq=50" ] ||
  { echo "FAIL: the checkpoint records '$recorded' as the run's config"; exit 1; }
echo "ok: 2-task training job, its epochs set on the command line and recorded"
# A setting of a key that does not exist: refused before anything runs.
config typo 2
job=$(submit typo 1 --set train_scDINO.epoch=2)
wait_gone "$job" 120
grep -q "unknown key 'train_scDINO.epoch' (known keys of train_scDINO: " "$work"/typo-*.out ||
  { echo "FAIL: a --set of an unknown key was not refused naming it"; cat "$work"/typo-*.out; exit 1; }
[ ! -e "$work/typo/checkpoint.safetensors" ] || { echo "FAIL: a run with a bad --set trained"; exit 1; }
echo "ok: a --set of an unknown key is refused naming the known keys"

# 2. Preemption: USR1 mid-way, requeue, resume, same result as uninterrupted.
config full 40
config preempted 40
ref=$(submit full 1)
job=$(submit preempted 1)
# A watch started while the job is queued follows it through its requeue
# to its real end.
"$build/services/ctl/scdinoctl" watch --wait 300 --run-dir "$work/preempted" > "$work/watch.out" 2> "$work/watch.err" &
watcher=$!
# And one without squeue (in a container): the exit code says requeue.
mkdir -p "$work/no-slurm-client"
PATH="$work/no-slurm-client" "$build/services/ctl/scdinoctl" watch --wait 300 --run-dir "$work/preempted" \
  > "$work/watch-nosqueue.out" 2> "$work/watch-nosqueue.err" &
blind=$!
for _ in $(seq 1 300); do
  [ -s "$work/preempted/log.jsonl" ] && break
  sleep 0.2
done
scancel --signal=USR1 "$job"
wait_gone "$job" 600
wait_gone "$ref" 600
grep -q "requeueing job $job" "$work"/preempted-*.out || { echo "FAIL: job was not requeued"; cat "$work"/preempted-*.out; exit 1; }
watch_rc=0
timeout 60 tail --pid="$watcher" -f /dev/null || { kill "$watcher"; echo "FAIL: the watch did not end with the job"; cat "$work/watch.err"; exit 1; }
wait "$watcher" || watch_rc=$?
grep -q "ended STOPPED (exit 75); Slurm job $job is still queued: waiting for its next start" "$work/watch.err" &&
  { grep -q "COMPLETED" <(tail -1 "$work/watch.out") || grep -q "started again and ended COMPLETED" "$work/watch.err"; } &&
  [ "$watch_rc" -eq 0 ] ||
  { echo "FAIL: the watch did not follow the requeue to COMPLETED with exit 0 (exit $watch_rc)"; cat "$work/watch.err";
    tail -3 "$work/watch.out"; exit 1; }
watch_rc=0
timeout 60 tail --pid="$blind" -f /dev/null || { kill "$blind"; echo "FAIL: the watch without squeue did not end"; exit 1; }
wait "$blind" || watch_rc=$?
grep -q "ended STOPPED (exit 75), which the batch scripts requeue; squeue is not on this node's PATH: waiting up to 300 s" \
  "$work/watch-nosqueue.err" && { grep -q "COMPLETED" <(tail -1 "$work/watch-nosqueue.out") ||
  grep -q "started again and ended COMPLETED" "$work/watch-nosqueue.err"; } && [ "$watch_rc" -eq 0 ] ||
  { echo "FAIL: the watch without squeue did not follow the requeue (exit $watch_rc)"; cat "$work/watch-nosqueue.err";
    tail -3 "$work/watch-nosqueue.out"; exit 1; }
[ "$(iteration "$work/preempted/checkpoint.safetensors")" = 160 ] || { echo "FAIL: requeued run did not finish"; cat "$work"/preempted-*.out; exit 1; }
result=$(same_weights "$work/preempted/checkpoint.safetensors" "$work/full/checkpoint.safetensors")
[ "$result" = identical ] || { echo "FAIL: resumed run $result from the uninterrupted one"; exit 1; }
echo "ok: USR1 -> checkpoint -> requeue -> resume -> identical weights"

# 2b. A job-wide SIGTERM (scancel --full): the batch shell gets it too and
# must survive it to requeue; srun answers it with SIGKILL to its tasks, so
# no checkpoint is written at the signal (docs/trainer.md#preemption says
# so) and the job resumes from its last one, which is exact as well.
config termed 40
job=$(submit termed 1)
for _ in $(seq 1 300); do
  [ -s "$work/termed/log.jsonl" ] && break
  sleep 0.2
done
scancel --signal=TERM --full "$job"
wait_gone "$job" 600
grep -qE "after a signal \(TERM\).*; requeueing job $job" "$work"/termed-*.out ||
  { echo "FAIL: SIGTERM to the whole job did not requeue it"; cat "$work"/termed-*.out; exit 1; }
# What the docs say happens: srun kills the tasks (no exit 75, no checkpoint
# at the signal); the requeued run resumes from an epoch's end.
grep -q "srun: forcing job termination" "$work"/termed-*.out && ! grep -q "checkpoint written after a signal" "$work"/termed-*.out ||
  { echo "FAIL: a job-wide SIGTERM did not end as docs/trainer.md says (srun kills its tasks)"; cat "$work"/termed-*.out; exit 1; }
resumed=$(sed -n 's/.*resuming from iteration \([0-9]*\).*/\1/p' "$work"/termed-*.out | head -1)
[ -n "$resumed" ] && [ $((resumed % 4)) = 0 ] ||
  { echo "FAIL: the requeued run did not resume from an epoch's checkpoint (iteration '$resumed')"; cat "$work"/termed-*.out; exit 1; }
[ "$(iteration "$work/termed/checkpoint.safetensors")" = 160 ] || { echo "FAIL: run after SIGTERM did not finish"; cat "$work"/termed-*.out; exit 1; }
result=$(same_weights "$work/termed/checkpoint.safetensors" "$work/full/checkpoint.safetensors")
[ "$result" = identical ] || { echo "FAIL: run resumed after SIGTERM $result from the uninterrupted one"; exit 1; }
echo "ok: scancel --signal=TERM --full -> requeue -> resume from the last checkpoint -> identical weights"

# 2c. The requeue cap (SCDINO_MAX_REQUEUES, counted by Slurm's
# SLURM_RESTART_COUNT): at 0, a preempted job still checkpoints, then ends
# instead of requeueing and says how to resume.
config capped 400
job=$(SCDINO_MAX_REQUEUES=0 submit capped 1)
for _ in $(seq 1 300); do
  [ -s "$work/capped/log.jsonl" ] && break
  sleep 0.2
done
scancel --signal=USR1 "$job"
wait_gone "$job" 300
grep -q "already requeued 0 times (SCDINO_MAX_REQUEUES=0); not requeueing. Submit it again to resume." \
  "$work"/capped-*.out || { echo "FAIL: the requeue cap was not applied"; cat "$work"/capped-*.out; exit 1; }
! grep -q "requeueing job $job" "$work"/capped-*.out || { echo "FAIL: requeued past the cap"; exit 1; }
[ -s "$work/capped/checkpoint.safetensors" ] || { echo "FAIL: no checkpoint before the capped end"; exit 1; }
echo "ok: requeue cap: checkpoint, no requeue, a message saying how to resume"

# 2d. scancel cancels: Slurm signals every step of the job, the batch shell
# included, and marks it CANCELLED; the shell must not requeue it (Slurm
# requeues finished jobs too). After KillWait it is still CANCELLED, never
# restarted.
config cancelled 400
job=$(submit cancelled 1)
for _ in $(seq 1 300); do
  [ -s "$work/cancelled/log.jsonl" ] && break
  sleep 0.2
done
scancel "$job"
wait_gone "$job" 120
sleep 35  # KillWait (30 s): a requeue by the shell would show by now
state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
restarts=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
[ "$state" = CANCELLED ] && [ "$restarts" = 0 ] ||
  { echo "FAIL: scancel: the job is $state with Restarts=$restarts, expected CANCELLED and 0"; cat "$work"/cancelled-*.out; exit 1; }
grep -q "was cancelled (scancel): not requeued" "$work"/cancelled-*.out ||
  { echo "FAIL: the shell did not say it leaves a cancelled job alone"; cat "$work"/cancelled-*.out; exit 1; }
echo "ok: scancel: CANCELLED, Restarts=0 after KillWait, the shell said why it did not requeue"

# 2e. A requeue that fails (sbatch --no-requeue) ends the job with the step's
# code: FAILED with 75, never COMPLETED with 0 (an afterok job would run on
# an unfinished model).
config norequeue 400
job=$(sbatch --parsable --no-requeue --ntasks=1 --cpus-per-task=1 --output="$work/norequeue-%j.out" \
  --export=ALL,SCDINO_BIN="$build/services/trainer" "$src/deploy/slurm/train.sbatch" "$work/norequeue.yaml")
for _ in $(seq 1 300); do
  [ -s "$work/norequeue/log.jsonl" ] && break
  sleep 0.2
done
scancel --signal=USR1 "$job"
wait_gone "$job" 300
ended=$(scontrol show job -o "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).* ExitCode=\([0-9]*:[0-9]*\).*/\1 \2/p')
[ "$ended" = "FAILED 75:0" ] ||
  { echo "FAIL: a job that could not be requeued ended '$ended', expected FAILED 75:0"; cat "$work"/norequeue-*.out; exit 1; }
grep -q "could not be requeued" "$work"/norequeue-*.out || { echo "FAIL: the shell did not say the requeue failed"; exit 1; }
echo "ok: a requeue that fails ends the job FAILED with 75, saying so"

# 2f. A job array: each task its own job, its own config and run directory
# (%a in the config's path, as in --output), three runs trained.
for a in 0 1 2; do config "array$a" 1; done
job=$(sbatch --parsable --array=0-2 --ntasks=1 --cpus-per-task=1 --output="$work/array-%A_%a.out" \
  --export=ALL,SCDINO_BIN="$build/services/trainer" "$src/deploy/slurm/train.sbatch" "$work/array%a.yaml")
wait_gone "$job" 300
for a in 0 1 2; do
  [ "$(iteration "$work/array$a/checkpoint.safetensors" 2>/dev/null)" = 4 ] ||
    { echo "FAIL: array task $a did not train its run"; cat "$work"/array-*.out; exit 1; }
done
states=$(sacct -n -X -j "$job" -o JobID%20,State 2>/dev/null | awk '{print $2}' | sort | uniq -c | tr -s ' ') || states=""
[ -z "$states" ] || [ "$states" = " 3 COMPLETED" ] || { echo "FAIL: array tasks ended $states"; cat "$work"/array-*.out; exit 1; }
echo "ok: a 3-task job array trains three runs, each from its own config (%a)"

# scdinoctl against a trainer the batch script launched: status names the
# Slurm job and both ranks; stop ends the job through the API (exit 4, no
# requeue), with a checkpoint, and the endpoint file is removed.
config ctl 400
job=$(submit ctl 2)
for _ in $(seq 1 300); do
  [ -f "$work/ctl/endpoints/trainer.json" ] && break
  sleep 0.2
done
[ -f "$work/ctl/endpoints/trainer.json" ] || { echo "FAIL: no endpoint file from the Slurm-launched trainer"; cat "$work"/ctl-*.out; exit 1; }
status=$("$ctl" status --run-dir "$work/ctl" --json) || { echo "FAIL: scdinoctl status failed"; cat "$work"/ctl-*.out; exit 1; }
python3 - "$status" "$job" <<'PY' || { echo "FAIL: status does not describe the Slurm job: $status"; exit 1; }
import json, sys
s = json.loads(sys.argv[1])
assert s["run"]["slurm_job_id"] == sys.argv[2], s["run"]
assert int(s["run"]["world_size"]) == 2, s["run"]
PY
"$ctl" status --run-dir "$work/ctl"
"$ctl" stop --run-dir "$work/ctl" || { echo "FAIL: scdinoctl stop failed"; exit 1; }
wait_gone "$job" 120
grep -q "stopped after iteration" "$work"/ctl-*.out || { echo "FAIL: the job did not stop gracefully"; cat "$work"/ctl-*.out; exit 1; }
! grep -q "requeueing" "$work"/ctl-*.out || { echo "FAIL: a stop through the API was requeued"; exit 1; }
# srun names the tasks that exit non-zero ("tasks 0-1: ...", or one line a
# task): rank 1 must say 4 (API stop) as rank 0 does, not 3.
grep -qE "(tasks 0-1|task 1): Exited with exit code 4" "$work"/ctl-*.out && ! grep -q "exit code 3" "$work"/ctl-*.out ||
  { echo "FAIL: not every rank exited with the API-stop code 4"; cat "$work"/ctl-*.out; exit 1; }
[ ! -f "$work/ctl/endpoints/trainer.json" ] || { echo "FAIL: endpoint file left behind"; exit 1; }
[ -f "$work/ctl/checkpoint.safetensors" ] || { echo "FAIL: no checkpoint after stop"; exit 1; }
echo "ok: scdinoctl status and stop against a Slurm-launched 2-rank trainer"

# 4. deploy/slurm/evaluate.sbatch on 2 tasks: scdino-features split over the
# ranks (24 images in 5 shards), then scdino-eval on one task.
"$build/services/tools/scdino-synth" --out "$work/cells-data" --classes 2 --per-class 12 --channels 3 --size 16 --seed 3 \
  > /dev/null
cat > "$work/cells.yaml" <<YAML
meta: {name_of_run: cells, output_dir: "$work", dataset_dir: "$work/cells-data", seed: 5,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
downstream_analyses:
  compute_cls_features: {resize_length: 16}
  attention_visualisation: {num_images_per_class: 1, image_size: 32}
  kNN: {global: {n_neighbors: [5], temperature: 0.07}}
scdino: {threads: 1, features: {shard_size: 5}, evaluation: {tsne: false, umap: false}}
YAML
"$build/services/trainer/scdino-trainer" --config "$work/cells.yaml" > "$work/cells-train.out" 2>&1 ||
  { echo "FAIL: could not train the cells run"; tail -5 "$work/cells-train.out"; exit 1; }
job=$(sbatch --parsable --ntasks=2 --cpus-per-task=1 --output="$work/evaluate-%j.out" \
  --export=ALL,SCDINO_BUILD="$build" "$src/deploy/slurm/evaluate.sbatch" "$work/cells.yaml" --random-init \
  --checkpoint "$work/cells/checkpoint.safetensors")
wait_gone "$job" 300
out=$(cat "$work"/evaluate-*.out)
grep -q "rank 1 of 2" <<<"$out" || { echo "FAIL: scdino-features did not run on 2 ranks"; echo "$out"; exit 1; }
grep -qE "rank 1: [0-9]+ images.* [23] shards written" <<<"$out" ||
  { echo "FAIL: rank 1 did not write its shards"; echo "$out"; exit 1; }
/usr/bin/python3 - "$work/cells" <<'PY' || { echo "FAIL: features or evaluation of the 2-task job"; echo "$out"; exit 1; }
import csv, os, sys
import numpy as np
run = sys.argv[1]
for name in ("checkpoint", "random_init"):
    x = np.load(os.path.join(run, "features", name, "features.npy"))
    assert x.shape == (24, 32), (name, x.shape)
    rows = list(csv.DictReader(open(os.path.join(run, "features", name, "index.csv"))))
    assert [int(r["index"]) for r in rows] == list(range(24)), name
    assert not os.path.exists(os.path.join(run, "features", name, "shards")), name
    for f in ("knn_results.json", "confusion_matrix.png", "pca.png"):
        assert os.path.getsize(os.path.join(run, "eval", name, f)) > 0, (name, f)
rows = list(csv.DictReader(open(os.path.join(run, "eval", "knn_per_checkpoint.csv"))))
assert {r["features"] for r in rows} == {"checkpoint", "random_init"}, rows
PY
echo "ok: evaluate.sbatch: features on 2 tasks (5 shards), then kNN and plots on one"

# 4b. scDINO's channel combinations from one config, as docs/config.md
# submits them: a training array, one task per combination, each in the
# folder scDINO names its ViT, and an evaluation array that follows each
# task (aftercorr); the page at the top compares them, one kNN curve each
# as headless Chromium loads it.
sed -e 's/name_of_run: cells,/name_of_run: combos, channel_dict: {0: A, 1: B, 2: C},/' \
    -e 's/selected_channel_combination_per_run: \["012"\]/selected_channel_combination_per_run: ["012", "1"]/' \
    "$work/cells.yaml" > "$work/combos.yaml"
job=$(sbatch --parsable --array=0-1 --ntasks=1 --cpus-per-task=1 --output="$work/combos-%A_%a.out" \
  --export=ALL,SCDINO_BIN="$build/services/trainer" "$src/deploy/slurm/train.sbatch" "$work/combos.yaml")
eval_job=$(sbatch --parsable --array=0-1 --dependency=aftercorr:"$job" --ntasks=1 --cpus-per-task=1 \
  --output="$work/combos-eval-%A_%a.out" --export=ALL,SCDINO_BUILD="$build" "$src/deploy/slurm/evaluate.sbatch" \
  "$work/combos.yaml" --all-checkpoints --random-init --raw-pixels)
wait_gone "$job" 300
wait_gone "$eval_job" 300
for dir in scDINO_ViT_channel_A_B_C:0 scDINO_ViT_channel_B:1; do
  ckpt="$work/combos/${dir%:*}/checkpoint.safetensors"
  [ -s "$work/combos/${dir%:*}/eval/checkpoint0000/knn_results.json" ] ||
    { echo "FAIL: no evaluation in ${dir%:*}"; cat "$work"/combos-*.out; exit 1; }
  recorded=$(python3 - "$ckpt" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
print(json.loads(b[8:8 + n])['__metadata__']['config'].splitlines()[0])
PY
)
  [ "$recorded" = "# $work/combos.yaml --set scdino.channel_combination=${dir#*:}" ] ||
    { echo "FAIL: ${dir%:*} records '$recorded'"; exit 1; }
done
# The channel statistics once for both, over channels 0-2, beside them.
[ "$(ls "$work/combos" | tr '\n' ' ')" = \
  "channel_stats.json channel_stats.json.lock report.html scDINO_ViT_channel_A_B_C scDINO_ViT_channel_B " ] ||
  { echo "FAIL: the combinations' run holds $(ls "$work/combos")"; exit 1; }
ls "$work"/combos/*/channel_stats.json 2>/dev/null && { echo "FAIL: a combination computed statistics of its own"; exit 1; }
channels=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["channels"])' "$work/combos/channel_stats.json")
[ "$channels" = "[0, 1, 2]" ] || { echo "FAIL: the shared statistics are over channels $channels, not [0, 1, 2]"; exit 1; }
grep -q "array task 1: combination 1 of $work/combos.yaml" "$work"/combos-*.out || { echo "FAIL: task 1 did not say its combination"; exit 1; }
chromium=$(command -v chromium-headless-shell || command -v chromium || true)
[ -n "$chromium" ] || { echo "FAIL: no headless Chromium (scripts/install-deps.sh installs it)"; exit 1; }
"$chromium" --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom "file://$work/combos/report.html" \
  > "$work/combos-report.dom" 2>/dev/null
/usr/bin/python3 - "$work/combos-report.dom" <<'PY' || { echo "FAIL: the combinations' report (above)"; exit 1; }
import re, sys
dom = open(sys.argv[1]).read()
assert 'data-broken-images="0"' in dom, "the page did not load"
assert dom.count("<polyline") == 2, f"{dom.count('<polyline')} kNN curves, expected one per combination"
for folder, channels in (("scDINO_ViT_channel_A_B_C", "A, B, C"), ("scDINO_ViT_channel_B", "B")):
    row = re.search(rf"<td>{folder}</td><td>{channels}</td><td>completed[^<]*</td><td>1</td>", dom)
    assert row, f"no completed row for {folder}"
    assert f'href="{folder}/eval/report.html"' in dom, folder
assert "</span>random init</span>" in dom and "</span>raw pixels</span>" in dom, "no baselines"
print("combos/report.html: 2 curves, both combinations completed, baselines drawn")
PY
# scdinoctl on the top folder: both trainings, each ended COMPLETED with 0.
listed=$("$build/services/ctl/scdinoctl" status --run-dir "$work/combos" 2>&1)
for dir in scDINO_ViT_channel_A_B_C scDINO_ViT_channel_B; do
  grep -Eq "^$dir +COMPLETED +exit 0, Slurm job [0-9]+$" <<<"$listed" ||
    { echo "FAIL: scdinoctl status --run-dir $work/combos does not list $dir as COMPLETED with exit 0:"; echo "$listed"; exit 1; }
done
echo "ok: a job array on one config trains and evaluates both channel combinations, each in its own folder, compared on one page"

# 5. deploy/slurm/train-and-evaluate.sbatch: the trainer (one task) and
# scdino-eval --follow (a second step on the other task) in one job. Every
# numbered checkpoint is evaluated once, after the raw-pixel baseline,
# eval/knn_per_checkpoint.csv and the follower's scdino_eval_knn_top1_ratio
# agree, the follower exits 0 after the trainer.
cat > "$work/follow.yaml" <<YAML
meta: {name_of_run: follow, output_dir: "$work", dataset_dir: "$work/cells-data", seed: 5,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 5
  saveckp_freq: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
downstream_analyses:
  compute_cls_features: {resize_length: 16}
  attention_visualisation: {num_images_per_class: 0}
  kNN: {global: {n_neighbors: [5, 10], temperature: 0.07}}
scdino:
  threads: 1
  evaluation: {tsne: false, umap: false}
  metrics: {listen: 127.0.0.1, file_sd_dir: "$work/follow-targets", linger_seconds: 4}
YAML
job=$(sbatch --parsable --ntasks=2 --cpus-per-task=1 --output="$work/follow-%j.out" \
  --export=ALL,SCDINO_BUILD="$build" "$src/deploy/slurm/train-and-evaluate.sbatch" "$work/follow.yaml")
# Scrape the follower's metrics while it lives (it stays up 4 s after the
# end for this last scrape).
scrape="$work/follow-metrics.txt"
for _ in $(seq 1 600); do
  target=$(ls "$work"/follow-targets/follow_eval_rank0*.json 2>/dev/null | head -1 || true)
  if [ -n "$target" ]; then
    python3 - "$target" "$scrape" <<'PY' 2>/dev/null || true
import json, os, sys, urllib.request
url = "http://" + json.load(open(sys.argv[1]))[0]["targets"][0] + "/metrics"
text = urllib.request.urlopen(url, timeout=2).read().decode()
open(sys.argv[2] + ".new", "w").write(text)
os.replace(sys.argv[2] + ".new", sys.argv[2])
PY
  fi
  squeue -h -j "$job" 2>/dev/null | grep -q . || break
  sleep 0.5
done
wait_gone "$job" 300
out=$(cat "$work"/follow-*.out)
grep -q "trainer step exited 0, follower step 0" <<<"$out" ||
  { echo "FAIL: train-and-evaluate.sbatch: both steps must exit 0"; echo "$out"; exit 1; }
grep -q "the trainer ended COMPLETED" <<<"$out" || { echo "FAIL: the follower did not see the trainer end"; echo "$out"; exit 1; }
grep -q "train-and-evaluate.sbatch runs no preflight, stages no packed data set and binds no GPU per task" <<<"$out" ||
  { echo "FAIL: train-and-evaluate.sbatch did not say what it leaves out"; echo "$out"; exit 1; }
[ -s "$scrape" ] || { echo "FAIL: the follower's metrics were never scraped"; echo "$out"; exit 1; }
python3 - "$work/follow" "$scrape" <<'PY' || { echo "FAIL: follower results"; echo "$out"; exit 1; }
import csv, glob, os, re, sys
run, scrape = sys.argv[1], sys.argv[2]
numbered = sorted(os.path.basename(p)[:-len(".safetensors")] for p in glob.glob(run + "/checkpoint[0-9]*.safetensors"))
assert len(numbered) == 5, numbered
rows = list(csv.DictReader(open(run + "/eval/knn_per_checkpoint.csv")))
names = [r["features"] for r in rows if r["k"] == "5"]
assert names == ["raw_pixels"] + numbered, ("the raw pixels, then each checkpoint once, in order", names, numbered)
metric = {}
for line in open(scrape):
    m = re.match(r'scdino_eval_knn_top1_ratio\{(.*)\} (\S+)$', line.strip())
    if m:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        metric[(labels["checkpoint"], labels["epoch"], labels["k"])] = float(m.group(2))
for r in rows:
    # A baseline has no epoch: -1 in the CSV, epoch="none" in the metrics.
    key = (r["features"], r["epoch"] if r["epoch"] != "-1" else "none", r["k"])
    assert key in metric, ("no metric for", key, sorted(metric))
    assert abs(metric[key] - float(r["top1_accuracy"])) < 1e-6, (key, metric[key], r["top1_accuracy"])
evaluated = [l for l in open(scrape) if l.startswith("scdino_eval_checkpoints_evaluated_total")]
assert evaluated and float(evaluated[0].split()[-1]) == 6, evaluated
# The linear probe and k-means of each, in the table, the metrics and the report.
probes = list(csv.DictReader(open(run + "/eval/probes_per_checkpoint.csv")))
assert [p["features"] for p in probes] == ["raw_pixels"] + numbered, probes
for p in probes:
    assert p["linear_top1_accuracy"] and p["kmeans_adjusted_rand_index"], p
    for name, column in (("scdino_eval_linear_probe_top1_ratio", "linear_top1_accuracy"),
                         ("scdino_eval_kmeans_adjusted_rand_index_ratio", "kmeans_adjusted_rand_index")):
        got = [float(l.split()[-1]) for l in open(scrape)
               if l.startswith(name + "{") and f'checkpoint="{p["features"]}"' in l]
        assert len(got) == 1 and abs(got[0] - float(p[column])) < 1e-5, (name, p["features"], got, p[column])
report = open(run + "/eval/report.html").read()
for n in ["raw_pixels"] + numbered:
    assert f"<td>{n}</td>" in report, ("the report lacks", n)
assert "kNN, raw pixels" in report, "the report does not draw the raw-pixel baseline"
print(f"the raw pixels and {len(numbered)} checkpoints evaluated once each; CSV and metrics agree on {len(rows)} rows; "
      f"linear probe and k-means of each in probes_per_checkpoint.csv, the metrics and report.html")
PY
echo "ok: train-and-evaluate.sbatch: the raw pixels, then every checkpoint evaluated once by the follower (kNN, linear probe, k-means, report), CSV = metrics, both exit 0"
