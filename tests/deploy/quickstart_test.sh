#!/usr/bin/env bash
# The README's "Quick start on a GPU cluster" block, lifted from README.md
# and run line by line on the test cluster (scripts/slurm-cluster.sh: 2
# nodes, 4 stand-in GPUs each), with these substitutions and no others:
#   1. the image: this machine has no Enroot, so the build line is replaced
#      by a check that the CPU image's OCI bundle exists (made from this
#      build by container.ImageBuiltWithPodman), and the submit's --image
#      names that bundle (the batch scripts start it with Slurm's own
#      --container=BUNDLE instead of Pyxis's --container-image);
#   2. /shared is a directory inside the bundle's mounts, in the block and
#      in the copied config;
#   3. Slurm 22.05's --container runs one task per node, and the submit
#      gives each GPU a task: --gpus-per-node 4 becomes 1; a node's 48
#      stand-in CPUs are this machine's cores: 1 CPU a GPU (--cpus-per-gpu
#      1); the partition gpu is the test cluster's (cluster);
#   4. after the config is copied, the edit the README asks of the user
#      (the data set: a small synthetic one at the config's own path), a
#      model and schedule small enough for two CPU cores, and the CPU chosen
#      on purpose (scdino.device cpu: the stand-in GPUs cannot compute, and
#      auto refuses a bound GPU it cannot use);
#   5. before the last command, the wait the README asks of the user: until
#      the jobs the block submitted have ended (the submit's watch ends with
#      the training; the evaluation job starts after it).
# The checkout has a host build: its scdino-config checks the config before
# anything queues (only Slurm starts an OCI bundle here), and its scdinoctl
# watches (the image's, from enroot or as a job step: submit_test.sh).
# Then: every job of the block ended 0, the checkpoints and report exist,
# the submit's watch followed the run to COMPLETED (exit 0), the block's
# submit line on a config whose data set is gone ends the evaluation at
# once after the training fails, and the quick start's commands on a node
# without what they need say what is missing.
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" quickstart "$1" "$2"
fail() { echo "FAIL: $*"; exit 1; }
# The job ids submit.sh printed, the training's first; a job of the test
# left behind by a failure is cancelled.
submitted() { sed -n 's/^scdino-submit: \(training\|evaluation\): job \([0-9]*\),.*/\2/p' "$@" 2>/dev/null; }
trap 'submitted "$work"/command-*.out "$work/gone.out" | xargs -r scancel' EXIT
bundle="$build/test-scratch/container-bundle"
eval "$(bash "$src/scripts/slurm-cluster.sh" env)"
sinfo -h >/dev/null 2>&1 || fail "the test cluster is not running (bash scripts/slurm-cluster.sh start)"
srun --help 2>&1 | grep -qE -- '^ *--container[ =]' || fail "this Slurm's srun has no --container"

# The block: the first code block under the heading.
block=$(awk '/^## Quick start on a GPU cluster$/ {f = 1; next} f && /^## / {exit}
             f && /^```/ {n++; if (n == 2) exit; next} f && n == 1' "$src/README.md")
[ -n "$block" ] || fail "README.md has no code block under '## Quick start on a GPU cluster'"
commands=$(grep -c . <<<"$block")
[ "$commands" -le 4 ] || fail "the quick start has $commands commands, the README promises four"

shared="$work/shared"
image=/shared/images/scdino-cuda.sqsh
lifted=$(sed -e "s|^scripts/build-image.sh .*--sqsh $image\$|test -f $bundle/config.json|" \
             -e "s|--image $image|--image $bundle|" \
             -e "s|--gpus-per-node 4|--gpus-per-node 1 --cpus-per-gpu 1|" \
             -e "s|--partition gpu|--partition cluster|" \
             -e "s|/shared/|$shared/|g" <<<"$block")
grep -q "$image" <<<"$lifted" && fail "a use of the image the substitutions do not cover: $lifted"
echo "the quick start as run here:"
echo "$lifted"

# Substitution 4: the data set where the config says, and a small run.
config="$shared/scdino/run.yaml"
dataset=$(sed -n 's/^ *dataset_dir: *"\(.*\)".*/\1/p' "$src/configs/cluster.yaml")
[ -n "$dataset" ] || fail "configs/cluster.yaml has no meta.dataset_dir"
"$build/services/tools/scdino-synth" --out "${dataset/\/shared\//$shared/}" --classes 3 --per-class 16 --channels 5 \
  --size 24 --seed 7 >/dev/null || fail "scdino-synth"
shrink() {
  sed -i "s|\"/shared/|\"$shared/|g" "$config"
  $py - "$config" "$TINY_HYPERPARAMETERS" <<'PY' || fail "could not edit the copied config"
import sys, yaml
path, tiny = sys.argv[1], yaml.safe_load(sys.argv[2])
c = yaml.safe_load(open(path))
t = c["train_scDINO"]
t.update(epochs=2, saveckp_freq=1, batch_size_per_gpu=8, num_workers=1)
t["hyperparameters"].update(tiny)
c["downstream_analyses"]["compute_cls_features"].update(batch_size_per_gpu=16, resize_length=16)
c["downstream_analyses"]["kNN"] = {"global": {"n_neighbors": [5, 10], "temperature": 0.07}}
c["scdino"]["threads"] = 1
c["scdino"]["device"] = "cpu"  # the stand-in GPUs cannot compute (auto would refuse them: exit 2)
yaml.safe_dump(c, open(path, "w"), sort_keys=False)
PY
}

# A checkout of the scripts the block names, so that the jobs' output files
# land here; every command runs in one shell, as a user types them.
mkdir -p "$work/checkout"
for d in configs deploy scripts; do ln -s "$src/$d" "$work/checkout/$d"; done
ln -s "$build" "$work/checkout/build"
cd "$work/checkout" || fail "no checkout"
n=0
# The block's lines come on descriptor 3: srun passes its standard input on
# to its task, which would take the lines still to come.
while IFS= read -r -u 3 line; do
  n=$((n + 1))
  echo "quick start $n: $line"
  if [ "$n" -eq "$commands" ]; then
    # Substitution 5: the block's jobs are over before its last command.
    # The training first: a failed one leaves the evaluation pending for ever.
    for j in $(submitted "$work"/command-*.out); do
      wait_gone "$j" 600
      code=$(scontrol show job "$j" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9]*:[0-9]*\).*/\1/p')
      [ "$code" = "0:0" ] || { cat "$work/checkout"/scdino-*-"$j".out; fail "job $j ended ${code:-unknown}"; }
    done
  fi
  # A watch the user would leave with Ctrl-C has 10 minutes here.
  limit=$([[ $line == *" --watch"* ]] && echo "timeout 600" || echo "")
  eval "$limit $line" </dev/null > "$work/command-$n.out" 2>&1; code=$?
  cat "$work/command-$n.out"
  [ "$code" -eq 0 ] || fail "command $n ended $code: $line"
  [[ $line == *"cp configs/cluster.yaml"* ]] && shrink
done 3<<<"$lifted"
[ "$n" -eq "$commands" ] || fail "$n of the block's $commands commands ran"
[ "$(submitted "$work"/command-*.out | wc -l)" = 2 ] || fail "the block's submit printed no training and evaluation job: $(cat "$work"/command-*.out)"

# The block's jobs (each ended 0, above) wrote their output where it ran.
jobs=$(ls "$work/checkout"/scdino-*-*.out 2>/dev/null | sed 's/.*-\([0-9]*\)\.out$/\1/' | sort -u)
[ "$(wc -w <<<"$jobs")" -ge 2 ] || fail "expected a training and an evaluation job's output in $work/checkout: $(ls "$work/checkout")"
run="$shared/scdino/runs/cluster"
train_out=$(cat "$work/checkout"/scdino-train-*.out)
[ -f "$run/checkpoint.safetensors" ] && [ -f "$run/checkpoint0001.safetensors" ] ||
  { echo "$train_out"; fail "no checkpoints in $run: $(ls "$run")"; }
grep -q "node1" <<<"$train_out" && grep -q "node2" <<<"$train_out" ||
  { echo "$train_out"; fail "the training did not run on both nodes"; }
[ -s "$run/eval/report.html" ] || fail "no report at $run/eval/report.html"
for baseline in random_init raw_pixels; do
  grep -q "$baseline" "$run/eval/knn_per_checkpoint.csv" || fail "knn_per_checkpoint.csv has no $baseline row: $(cat "$run/eval/knn_per_checkpoint.csv")"
done
grep -q "^scdino-submit: watch: " "$work"/command-*.out && grep -q "COMPLETED" "$work"/command-*.out ||
  fail "the submit's watch did not follow the run to COMPLETED: $(cat "$work"/command-*.out)"
echo "ok: the README's quick start ran on the test cluster: $commands commands, jobs $(echo $jobs), report $run/eval/report.html"

# The block's submit line on a config whose data set is gone (not judged on
# the login node): the training fails, and its evaluation ends at once.
submit_line=$(grep -m1 'deploy/slurm/submit.sh' <<<"$lifted" | sed 's/ --watch//')
gone="$shared/scdino/gone.yaml"
$py - "$config" "$gone" "$shared/data/gone" <<'PY' || fail "could not write $gone"
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["meta"].update(name_of_run="gone", dataset_dir=sys.argv[3])
yaml.safe_dump(c, open(sys.argv[2], "w"), sort_keys=False)
PY
eval "${submit_line/$config/$gone}" </dev/null > "$work/gone.out" 2>&1 || { cat "$work/gone.out"; fail "submit of $gone"; }
ids=($(submitted "$work/gone.out"))
[ "${#ids[@]}" = 2 ] || { cat "$work/gone.out"; fail "submit of $gone printed no job ids"; }
waited=$(dependent_ended_after_failure "${ids[0]}" "${ids[1]}" "$work/checkout/scdino-train-${ids[0]}.out") ||
  { echo "$waited"; exit 1; }
echo "ok: a training without its data failed and its evaluation ended within $waited s"

# What is missing, said by the command that needs it.
err=$(bash "$src/deploy/slurm/train.sbatch" "$config" 2>&1) && fail "train.sbatch outside a job ran"
grep -qF "is a Slurm batch script: submit it with sbatch" <<<"$err" || fail "train.sbatch outside a job: $err"
if ! srun --help 2>&1 | grep -qE -- '^ *--container-image[ =]'; then
  touch "$work/image.sqsh"
  job=$(SCDINO_CONTAINER="$work/image.sqsh" sbatch --parsable --nodes=1 --ntasks-per-node=1 \
        --output="$work/nopyxis-%j.out" "$src/deploy/slurm/train.sbatch" "$config") || fail "sbatch"
  wait_gone "$job" 120
  grep -qF "needs srun --container-image, which this Slurm's srun lacks; it needs Pyxis" "$work/nopyxis-$job.out" ||
    { cat "$work/nopyxis-$job.out"; fail "a .sqsh image on a Slurm without Pyxis was not named"; }
  echo "ok: an Enroot image on a Slurm without Pyxis: the job says Pyxis is missing"
fi
if ! command -v enroot >/dev/null; then
  err=$(bash "$src/scripts/build-image.sh" --cuda --sqsh "$work/x.sqsh" 2>&1) && fail "build-image.sh --sqsh ran without enroot"
  grep -qF "needs enroot on this machine" <<<"$err" || fail "build-image.sh --sqsh without enroot: $err"
  echo "ok: build-image.sh --sqsh without enroot says so"
fi
