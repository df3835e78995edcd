#!/usr/bin/env bash
# The README's "Quick start on a GPU cluster" block, lifted from README.md
# and run line by line on the test cluster (scripts/slurm-cluster.sh: 2
# nodes, 4 stand-in GPUs each), with these substitutions and no others:
#   1. the image: this machine has no Enroot, so the build line is replaced
#      by a check that the CPU image's OCI bundle exists (made from this
#      build by container.ImageBuiltWithPodman), SCDINO_CONTAINER names that
#      bundle, and srun's Pyxis flags (--container-image, --container-mounts,
#      --container-env) become Slurm's own --container=BUNDLE;
#   2. /shared is a directory inside the bundle's mounts, in the block and
#      in the copied config;
#   3. Slurm 22.05's --container runs one task per node: 4 tasks a node
#      become 1 (the stand-in GPUs stay: --gpus-per-task=1);
#   4. after the config is copied, the edit the README asks of the user
#      (the data set: a small synthetic one at the config's own path), a
#      model and schedule small enough for two CPU cores, and the CPU chosen
#      on purpose (scdino.device cpu: the stand-in GPUs cannot compute, and
#      auto refuses a bound GPU it cannot use);
#   5. before the last command, the wait the README asks of the user: until
#      the jobs the block submitted have ended (the watch ends with the
#      training; the evaluation job starts after it).
# Then: every job of the block ended 0, the checkpoints and report exist,
# scdinoctl watch saw the run from another node's container, and the
# quick start's commands on a node without what they need say what is
# missing.
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" quickstart "$1" "$2"
fail() { echo "FAIL: $*"; exit 1; }
# A job of the block left behind by a failure is cancelled.
trap 'ls "$work/checkout"/scdino-*-*.out 2>/dev/null | sed "s/.*-\([0-9]*\)\.out$/\1/" | xargs -r scancel' EXIT
bundle="$build/test-scratch/container-bundle"
eval "$(bash "$src/scripts/slurm-cluster.sh" env)"
sinfo -h >/dev/null 2>&1 || fail "the test cluster is not running (bash scripts/slurm-cluster.sh start)"
srun --help 2>&1 | grep -qE -- '^ *--container[ =]' || fail "this Slurm's srun has no --container"

# The block: the first code block under the heading.
block=$(awk '/^## Quick start on a GPU cluster$/ {f = 1; next} f && /^## / {exit}
             f && /^```/ {n++; if (n == 2) exit; next} f && n == 1' "$src/README.md")
[ -n "$block" ] || fail "README.md has no code block under '## Quick start on a GPU cluster'"
commands=$(grep -c . <<<"$block")
[ "$commands" -le 6 ] || fail "the quick start has $commands commands, the README promises six at most"

shared="$work/shared"
image=/shared/images/scdino-cuda.sqsh
lifted=$(sed -e "s|^scripts/build-image.sh .*--sqsh $image\$|test -f $bundle/config.json|" \
             -e "s|--container-env=[^ ]* ||" \
             -e "s|--container-image=$image --container-mounts=[^ ]*|--container=$bundle|" \
             -e "s|SCDINO_CONTAINER=$image|SCDINO_CONTAINER=$bundle|g" \
             -e "s|--ntasks-per-node=4|--ntasks-per-node=1|g" \
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
cd "$work/checkout" || fail "no checkout"
n=0
watch_out="$work/watch.out"
# The block's lines come on descriptor 3: srun passes its standard input on
# to its task, which would take the lines still to come.
while IFS= read -r -u 3 line; do
  n=$((n + 1))
  echo "quick start $n: $line"
  if [ "$n" -eq "$commands" ]; then
    # Substitution 5: the block's jobs are over before its last command.
    # The training first: a failed one leaves the evaluation pending for ever.
    for j in $job $(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$work"/command-*.out); do
      wait_gone "$j" 600
      code=$(scontrol show job "$j" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9]*:[0-9]*\).*/\1/p')
      [ "$code" = "0:0" ] || { cat "$work/checkout"/scdino-*-"$j".out; fail "job $j ended ${code:-unknown}"; }
    done
  fi
  case $line in
    # The user leaves it with Ctrl-C; here it has 5 minutes.
    # (env: the line may start with a variable's assignment)
    *"scdinoctl watch"*) eval "timeout 300 env $line" </dev/null > "$watch_out" 2>&1; code=$?
                         [ "$code" -eq 0 ] || { cat "$watch_out"; fail "command $n ended $code: $line"; } ;;
    *) eval "$line" </dev/null > "$work/command-$n.out" 2>&1; code=$?
       cat "$work/command-$n.out"
       [ "$code" -eq 0 ] || fail "command $n ended $code: $line" ;;
  esac
  [[ $line == *"cp configs/cluster.yaml"* ]] && shrink
done 3<<<"$lifted"
[ "$n" -eq "$commands" ] || fail "$n of the block's $commands commands ran"
[ -n "${job:-}" ] || fail "the block did not set \$job to the training job"

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
grep -q random_init "$run/eval/knn_per_checkpoint.csv" || fail "knn_per_checkpoint.csv has no random_init row"
grep -qE "RUNNING|COMPLETED" "$watch_out" || { cat "$watch_out"; fail "scdinoctl watch saw nothing of the run"; }
echo "ok: the README's quick start ran on the test cluster: $commands commands, jobs $(echo $jobs), report $run/eval/report.html"

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
