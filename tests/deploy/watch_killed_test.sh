#!/usr/bin/env bash
# scdinoctl watch --job on the test Slurm when a trainer is killed with
# SIGKILL mid-run, before it can write its end record (as the kernel's
# out-of-memory killer or a lost node ends it): in a job that goes on to a
# second life, the watch says so and follows that life to COMPLETED (exit
# 0); in a job that ends with the kill, the watch says the job left the
# queue without a next life (exit 1).
#   tests/deploy/watch_killed_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" watch-killed "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
"$build/services/tools/scdino-synth" --out "$work/data" --classes 2 --per-class 12 --channels 3 --size 16 --seed 3 >/dev/null
trainer="$build/services/trainer/scdino-trainer" ctl="$build/services/ctl/scdinoctl"
# A run long enough to be killed in (3000 epochs of 6 tiny steps).
cat > "$work/run.yaml" <<YAML
meta: {name_of_run: k, output_dir: "$work/runs", dataset_dir: "$work/data", seed: 2,
       channel_dict: {0: A, 1: B, 2: C}, selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 3000
  saveckp_freq: 1000
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  metrics: {enabled: false}
YAML
cd "$work"

# Starts the watch of job $1 in the background, waits until it streams the
# running trainer, then kills that trainer (SIGKILL).
watch_and_kill() {
  "$ctl" watch --job "$1" --run-dir "$work/runs/k" > "$2.out" 2> "$2.err" &
  watcher=$!
  for _ in $(seq 1 240); do
    grep -q ' RUNNING ' "$2.out" 2>/dev/null && break
    kill -0 "$watcher" 2>/dev/null || { echo "FAIL: the watch of job $1 ended before the kill"; cat "$2.err"; exit 1; }
    sleep 0.5
  done
  grep -q ' RUNNING ' "$2.out" || { echo "FAIL: the watch of job $1 never streamed the run"; cat "$2.err"; exit 1; }
  pkill -KILL -f "$trainer --config $work/run.yaml" || { echo "FAIL: no trainer of job $1 to kill"; exit 1; }
}

# 1. A job whose trainer is killed, then runs a second, short life. The
# second starts once the watch has said it waits for it (a file the test
# makes; 60 s at most), so that the watch has seen the first end before the
# second begins, whatever the machine's speed.
cat > two-lives.sh <<SH
#!/bin/bash
"$trainer" --config "$work/run.yaml" > "$work/life1.out" 2>&1
echo "life 1: exit \$?" > "$work/lives"
for _ in \$(seq 1 120); do [ -e "$work/next-life" ] && break; sleep 0.5; done
sed 's/epochs: 3000/epochs: 2/' "$work/run.yaml" > "$work/short.yaml"
"$trainer" --config "$work/short.yaml" --no-resume > "$work/life2.out" 2>&1
echo "life 2: exit \$?" >> "$work/lives"
SH
job=$(sbatch --parsable --output="$work/two-lives.log" two-lives.sh)
watch_and_kill "$job" two
for _ in $(seq 1 120); do
  grep -q "waiting for its next start" two.err 2>/dev/null && break
  kill -0 "$watcher" 2>/dev/null || break
  sleep 0.5
done
touch "$work/next-life"
wait "$watcher" && rc=0 || rc=$?
grep -qx "life 1: exit 137" lives && grep -qx "life 2: exit 0" lives ||
  { echo "FAIL: the job's lives: $(cat lives 2>/dev/null)"; cat life2.out; exit 1; }
[ "$rc" = 0 ] && grep -q "the trainer of $work/runs/k went away without its end record" two.err &&
  grep -q "ended KILLED; Slurm job $job is still queued: waiting for its next start" two.err &&
  grep -q "COMPLETED" <(tail -1 two.out; grep 'ended COMPLETED' two.err) ||
  { echo "FAIL: the watch did not follow the job past the killed life to COMPLETED (exit $rc)"; cat two.err; tail -2 two.out; exit 1; }
echo "ok: a life killed before its end record, the job's next life followed to COMPLETED, exit 0"

# 2. A job that ends with its killed trainer.
rm -rf "$work/runs"
job=$(sbatch --parsable --output="$work/one-life.log" --wrap "'$trainer' --config '$work/run.yaml' > '$work/only.out' 2>&1")
watch_and_kill "$job" one
wait "$watcher" && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "Slurm job $job left the queue without starting the trainer again" one.err ||
  { echo "FAIL: the watch of a job that ended with its killed life (exit $rc)"; cat one.err; exit 1; }
echo "ok: a job that ended with its killed life: the watch said so, exit 1"
