#!/usr/bin/env bash
# deploy/slurm/submit.sh on the test Slurm (one node, no GPUs), as a user on
# the login node runs it: a config with a typo, a GPU submission to a
# partition without GPUs and an unknown partition are refused before
# anything queues; two channel combinations are trained (a job array) and
# evaluated after each (aftercorr), with the logs, reports and watch line it
# printed there (also from the image: with enroot on the login node, and as
# a job step without); a training that fails ends its evaluation at once
# instead of leaving it pending.
#   tests/deploy/submit_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" submit "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
"$build/services/tools/scdino-synth" --out "$work/data" --classes 2 --per-class 12 --channels 3 --size 16 --seed 3 >/dev/null
export SCDINO_BUILD="$build" SCDINO_BIN="$build/services/trainer" SCDINO_PREFLIGHT=0
unset SCDINO_CONTAINER
submit=("$src/deploy/slurm/submit.sh")
cat > "$work/run.yaml" <<YAML
meta: {name_of_run: combos, output_dir: "$work/runs", dataset_dir: "$work/data", seed: 2,
       channel_dict: {0: A, 1: B, 2: C}, selected_channel_combination_per_run: ["012", "1"]}
train_scDINO:
  epochs: 2
  saveckp_freq: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  metrics: {enabled: false}
YAML
cd "$work"
jobs_now() { squeue -h -o '%i' 2>/dev/null | sort | paste -sd' ' -; }

# 1. Refused before anything queues: a typo (file and key named), a GPU
# submission where no partition has GPUs, a partition that does not exist.
before=$(jobs_now)
sed 's/  epochs: 2/  epocs: 2/' run.yaml > typo.yaml
err=$("${submit[@]}" typo.yaml --gpus-per-node 0 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "typo.yaml" <<<"$err" && grep -q "epocs" <<<"$err" && grep -q "nothing submitted" <<<"$err" ||
  { echo "FAIL: a typo was not refused naming the file and key (exit $rc): $err"; exit 1; }
err=$("${submit[@]}" run.yaml --gpus-per-node 2 2>&1) && rc=0 || rc=$?
part=$(sinfo -h -o '%P' | sed -n 's/\*$//p' | head -1)
[ "$rc" = 2 ] && grep -q "partition $part has no GPUs" <<<"$err" && grep -q "no partition of this cluster has GPUs" <<<"$err" ||
  { echo "FAIL: a GPU submission to $part (no GPUs) was not refused naming it (exit $rc): $err"; exit 1; }
err=$("${submit[@]}" run.yaml --gpus-per-node 0 --partition nosuch 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "\-\-partition nosuch: no such partition (sinfo lists: $part)" <<<"$err" ||
  { echo "FAIL: an unknown partition was not refused (exit $rc): $err"; exit 1; }
err=$("${submit[@]}" run.yaml --gpus-per-node 0 --image "$work/nowhere.sqsh" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "\-\-image $work/nowhere.sqsh: no such file" <<<"$err" ||
  { echo "FAIL: a missing image was not refused (exit $rc): $err"; exit 1; }
mkdir -p "$work/no-slurm" && ln -sf "$(command -v dirname)" "$(command -v basename)" "$work/no-slurm/"
err=$(PATH="$work/no-slurm" /bin/bash "${submit[@]}" run.yaml 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "no Slurm client on this node (sbatch and sinfo not found)" <<<"$err" ||
  { echo "FAIL: a node without Slurm's client was not said (exit $rc): $err"; exit 1; }
[ "$(jobs_now)" = "$before" ] || { echo "FAIL: a refused submission queued a job: $(jobs_now)"; exit 1; }
echo "ok: a typo, a GPU submission to $part, an unknown partition, a missing image and a node without Slurm refused, nothing queued"

# From the image, on a login node with enroot and no host build: the
# image's scdino-config checks the config, and the watch line starts the
# image's scdinoctl there (no job, no GPU). Enroot is not in Debian: the
# stand-in's `start` runs the host build's program of that name with the
# environment given, and logs its command line. The jobs are submitted held
# and cancelled (the test cluster has no Pyxis). The watch line's
# deploy/slurm/scdinoctl.sh answers the image's squeue with this node's
# (its relay, not the stand-in, is what the image's scdinoctl asks): on the
# cancelled job it says at once that the run never started; with the job
# id of the run that 2. starts with the same config, started while that
# job queues, it follows the run to its end.
touch "$work/image.sqsh"
# The image has no Slurm client: inside the stand-in, squeue is missing.
mkdir -p "$work/image-bin"
printf '#!/bin/sh\necho "squeue: not in the image" >&2\nexit 127\n' > "$work/image-bin/squeue"
chmod +x "$work/image-bin/squeue"
export FAKE_ENROOT_LOG="$work/enroot.log" FAKE_ENROOT_PROGRAMS="$build/services/tools:$build/services/ctl"
with_enroot="$src/tests/support/fake-enroot:$PATH"
SBATCH_HOLD=1 PATH="$with_enroot" SCDINO_BUILD="$work/no-build" \
  "${submit[@]}" run.yaml --gpus-per-node 0 --cpus-per-gpu 1 --image "$work/image.sqsh" > image.out 2>&1 ||
  { echo "FAIL: submit with --image and enroot"; cat image.out; exit 1; }
sed -n 's/^scdino-submit: \(training\|evaluation\): job \([0-9]*\).*/\2/p' image.out | xargs -r scancel
image_train=$(sed -n 's/^scdino-submit: training: job \([0-9]*\).*/\1/p' image.out)
grep -qxF "start --env NVIDIA_VISIBLE_DEVICES=void --mount $work:$work $work/image.sqsh scdino-config check $work/run.yaml" \
  "$FAKE_ENROOT_LOG" || { echo "FAIL: the image's scdino-config did not check the config: $(cat "$FAKE_ENROOT_LOG")"; exit 1; }
image_watch=$(sed -n 's/^scdino-submit: watch: //p' image.out)
[ -n "$image_train" ] && [ "$image_watch" = "$src/deploy/slurm/scdinoctl.sh --image $work/image.sqsh --mount $work/runs/combos watch --job ${image_train}_0 --run-dir $work/runs/combos --combination scDINO_ViT_channel_A_B_C" ] ||
  { echo "FAIL: the watch line from the image with enroot: $image_watch"; exit 1; }
wait_gone "$image_train" 60
mkdir -p "$work/relay-tmp"
out=$(TMPDIR="$work/relay-tmp" PATH="$with_enroot" FAKE_ENROOT_PATH="$work/image-bin:$PATH" timeout 60 $image_watch 2>&1) &&
  rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "Slurm job ${image_train}_0 left the queue and the trainer of $work/runs/combos" <<<"$out" ||
  { echo "FAIL: the enroot watch line of a cancelled job (exit $rc): $out"; exit 1; }
[ -z "$(ls -A "$work/relay-tmp")" ] || { echo "FAIL: scdinoctl.sh left its relay folder: $(ls "$work/relay-tmp")"; exit 1; }
# On a login node without enroot (a host scdino-config checks), the watch
# line runs scdinoctl.sh as a one-task step on a compute node, where Pyxis
# has put enroot (the stand-in, on the PATH the step inherits): on the
# cancelled job it says the run never started, with the step's exit code.
SBATCH_HOLD=1 PATH="$build/services/tools:$PATH" SCDINO_BUILD="$work/no-build" \
  "${submit[@]}" run.yaml --gpus-per-node 0 --cpus-per-gpu 1 --image "$work/image.sqsh" > step.out 2>&1 ||
  { echo "FAIL: submit with --image and no enroot"; cat step.out; exit 1; }
sed -n 's/^scdino-submit: \(training\|evaluation\): job \([0-9]*\).*/\2/p' step.out | xargs -r scancel
step_train=$(sed -n 's/^scdino-submit: training: job \([0-9]*\).*/\1/p' step.out)
step_watch=$(sed -n 's/^scdino-submit: watch: //p' step.out)
[ -n "$step_train" ] && [ "$step_watch" = "srun --ntasks=1 --cpus-per-task=1 --job-name=scdino-watch ${image_watch/--job ${image_train}_0/--job ${step_train}_0}" ] ||
  { echo "FAIL: the watch line from the image without enroot: $step_watch"; exit 1; }
wait_gone "$step_train" 60
out=$(PATH="$with_enroot" FAKE_ENROOT_PATH="$work/image-bin:$PATH" timeout 120 $step_watch 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "Slurm job ${step_train}_0 left the queue and the trainer of $work/runs/combos" <<<"$out" ||
  { echo "FAIL: the watch line as a job step, of a cancelled job (exit $rc): $out"; exit 1; }
echo "ok: the image's watch line, with enroot here and as a job step without, said that a cancelled job never started the run"

# 2. Two combinations: one training array, one evaluation array after it.
"${submit[@]}" run.yaml --gpus-per-node 0 --cpus-per-gpu 1 > submit.out 2>submit.err ||
  { echo "FAIL: submit failed"; cat submit.out submit.err; exit 1; }
cat submit.out
train=$(sed -n 's/^scdino-submit: training: job \([0-9]*\) (array 0-1.*/\1/p' submit.out)
evaluation=$(sed -n 's/^scdino-submit: evaluation: job \([0-9]*\),.*/\1/p' submit.out)
[ -n "$train" ] && [ -n "$evaluation" ] || { echo "FAIL: submit printed no job ids"; exit 1; }
scontrol show job "$evaluation" | grep -q "Dependency=aftercorr:${train}_\*" ||
  { echo "FAIL: the evaluation does not follow the training: $(scontrol show job "$evaluation" | grep -o 'Dependency=[^ ]*')"; exit 1; }
watch=$(sed -n 's/^scdino-submit: watch: //p' submit.out)
[ "$watch" = "$build/services/ctl/scdinoctl watch --job ${train}_0 --run-dir $work/runs/combos --combination scDINO_ViT_channel_A_B_C" ] ||
  { echo "FAIL: the watch line: $watch"; exit 1; }
timeout 400 $watch > watch.out 2>&1 &
watch_pid=$!
PATH="$with_enroot" FAKE_ENROOT_PATH="$work/image-bin:$PATH" timeout 400 ${image_watch/--job ${image_train}_0/--job ${train}_0} > image-watch.out 2>&1 &
image_watch_pid=$!
unset FAKE_ENROOT_PROGRAMS
wait_gone "$train" 300
wait_gone "$evaluation" 300
for c in 0:scDINO_ViT_channel_A_B_C 1:scDINO_ViT_channel_B; do
  dir="$work/runs/combos/${c#*:}"
  grep -q "^scdino-submit: combination ${c%%:*} (.*): $dir$" submit.out || { echo "FAIL: combination ${c%%:*}'s folder not printed"; exit 1; }
  for log in "scdino-train-${train}_${c%%:*}.out" "scdino-evaluate-${evaluation}_${c%%:*}.out"; do
    [ -s "$work/$log" ] && grep -q "$work/$log" submit.out || { echo "FAIL: the log $log (printed, and there)"; ls "$work"; exit 1; }
  done
  for f in eval/report.html eval/checkpoint0000/knn_results.json features/raw_pixels; do
    [ -e "$dir/$f" ] || { echo "FAIL: no $f in ${c#*:}"; cat "$work"/scdino-*.out; exit 1; }
  done
  grep -q "report: $dir/eval/report.html" submit.out || { echo "FAIL: ${c#*:}'s report not printed"; exit 1; }
done
[ -s "$work/runs/combos/report.html" ] && grep -q "the combinations compared: $work/runs/combos/report.html" submit.out ||
  { echo "FAIL: the comparison page (printed, and there)"; exit 1; }
for job in "${train}_0" "${train}_1" "${evaluation}_0" "${evaluation}_1"; do
  state=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1)
  [ "$state" = JobState=COMPLETED ] || { echo "FAIL: job $job: ${state:-unknown to Slurm}"; exit 1; }
done
# The watch line as printed, started while the jobs queued (control on,
# its default): it followed the first combination's training to its end.
wait "$watch_pid" && rc=0 || rc=$?
[ "$rc" = 0 ] && grep -q "COMPLETED" watch.out || { echo "FAIL: the printed watch line exited $rc"; cat watch.out; exit 1; }
# Started again after the run ended, it says at once how it ended.
out=$(timeout 60 $watch 2>&1) && rc=0 || rc=$?
[ "$rc" = 0 ] && grep -q "Slurm job ${train}_0 is no longer queued; the trainer of $work/runs/combos/scDINO_ViT_channel_A_B_C ended COMPLETED" <<<"$out" ||
  { echo "FAIL: a watch started after the run ended (exit $rc): $out"; exit 1; }
echo "ok: two combinations trained and evaluated from one submission; logs, reports and the watch line printed, followed, and answered after the end"
# The image's watch line, with 2.'s job: it waited for the run and
# followed the first combination's training to its end.
wait "$image_watch_pid" && rc=0 || rc=$?
[ "$rc" = 0 ] && grep -q "COMPLETED" image-watch.out &&
  grep -q "^start --env NVIDIA_VISIBLE_DEVICES=void --env SCDINO_SQUEUE=.*/squeue .* $work/image.sqsh scdinoctl watch --job ${train}_0 " "$FAKE_ENROOT_LOG" ||
  { echo "FAIL: the enroot watch line (exit $rc):"; cat image-watch.out; cat "$FAKE_ENROOT_LOG"; exit 1; }
unset FAKE_ENROOT_LOG
echo "ok: with enroot and no host build, the image checked the config and its watch line, run on this node, followed the run"

# A watch waits as long as its job is queued (a held job: longer than
# any --wait would have), and fails once the job leaves the queue without
# the run having started.
held=$(sbatch --parsable --hold --output=/dev/null --wrap "true") || { echo "FAIL: sbatch --hold"; exit 1; }
"$build/services/ctl/scdinoctl" watch --job "$held" --run-dir "$work/runs/held" > held.out 2>&1 &
held_pid=$!
sleep 8
kill -0 "$held_pid" 2>/dev/null || { echo "FAIL: the watch of a held job ended while it was queued"; cat held.out; exit 1; }
scancel "$held"
wait "$held_pid" && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "Slurm job $held left the queue and the trainer of $work/runs/held never started in it" held.out ||
  { echo "FAIL: the watch of a cancelled queued job (exit $rc)"; cat held.out; exit 1; }
echo "ok: scdinoctl watch --job waited while the job was held and failed when it was cancelled, naming it"

# 3. A training that fails (its data set is not there: not judged on the
# login node) ends its evaluation at once: never pending.
sed -e "s|dataset_dir: \"$work/data\"|dataset_dir: \"$work/gone\"|" -e 's/\["012", "1"\]/["012"]/' run.yaml > gone.yaml
"${submit[@]}" gone.yaml --gpus-per-node 0 --cpus-per-gpu 1 > gone.out 2>&1 || { echo "FAIL: submit failed"; cat gone.out; exit 1; }
grep -q "not checked against the images" gone.out || { echo "FAIL: the unseen data set was not said"; cat gone.out; exit 1; }
train=$(sed -n 's/^scdino-submit: training: job \([0-9]*\),.*/\1/p' gone.out)
evaluation=$(sed -n 's/^scdino-submit: evaluation: job \([0-9]*\),.*/\1/p' gone.out)
[ -n "$train" ] && [ -n "$evaluation" ] || { echo "FAIL: submit printed no job ids"; cat gone.out; exit 1; }
waited=$(dependent_ended_after_failure "$train" "$evaluation" "scdino-train-$train.out") || { echo "$waited"; exit 1; }
watch=$(sed -n 's/^scdino-submit: watch: //p' gone.out)
out=$(timeout 60 $watch 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "Slurm job $train " <<<"$out" || { echo "FAIL: the failed training's watch line (exit $rc): $out"; exit 1; }
echo "ok: a failed training ended its evaluation within $waited s, never pending; its watch line says so (exit 1)"
