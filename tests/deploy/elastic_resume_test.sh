#!/usr/bin/env bash
# Exact resume on another number of ranks, on the test Slurm (srun, Gloo,
# the real trainer binary). A 2-rank run (2 x 6 = 12 a step, 48 images: 4
# steps an epoch) stops inside epoch 2 (iteration 6: 24 images of that
# epoch trained on) and goes on from copies of its run directory:
#   - on 1 and on 3 ranks with the global batch kept (scdino.elastic_resume:
#     global_batch, the default: 1 x 12, 3 x 4): every later step trains on
#     the images, and with the learning rate, weight decay, teacher momentum
#     and temperature, of an uninterrupted 2-rank run at the same step;
#   - on 3 ranks with the per-rank batch kept (batch_per_gpu: 3 x 6 = 18, 2
#     steps an epoch): each image of epoch 2 not trained on before the stop
#     comes once at most, none trained on before, and no more are left out
#     than a global batch can hold.
# What each rank trained on comes from its sampler log (scdino.log_samples).
# A resume on 5 ranks with the global batch kept is refused naming the
# numbers (exit 2) before any rendezvous.
#   tests/deploy/elastic_resume_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" elastic-resume "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
trainer="$build/services/trainer/scdino-trainer"

config() {  # NAME [ELASTIC_RESUME]: a config whose run directory is $work/NAME
  cat > "$work/$1.yaml" <<YAML
meta: {name_of_run: $1, output_dir: "$work", seed: 11, selected_channel_combination_per_run: ["01"]}
train_scDINO:
  epochs: 3
  saveckp_freq: 10
  batch_size_per_gpu: 6
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  log_every: 1
  data_source: synthetic
  synthetic: {classes: 2, per_class: 24, channels: 2, size: 16, seed: 4}
  control: {enabled: false}
  metrics: {enabled: false}
  distributed_timeout_s: 120
  log_samples: true
  elastic_resume: ${2:-global_batch}
YAML
}
train() {  # RANKS NAME [ARGS...]: srun the trainer; its output in $work/NAME.out
  local n=$1 name=$2
  shift 2
  srun --ntasks="$n" --overcommit --cpus-per-task=1 --kill-on-bad-exit=1 --chdir="$work" \
    "$trainer" --config "$work/$name.yaml" "$@" > "$work/$name.out" 2>&1 && rc=0 || rc=$?
}
resume_from_stop() {  # NAME: a copy of the stopped run's directory under NAME
  rm -rf "${work:?}/$1"
  cp -a "$work/stopped" "$work/$1"
  rm -f "$work/$1"/endpoints/* "$work/$1"/samples/*
}

config full
train 2 full
[ "$rc" = 0 ] || { echo "FAIL: the uninterrupted 2-rank run exited $rc"; cat "$work/full.out"; exit 1; }
config stopped
train 2 stopped --stop-after-iterations 6
[ "$rc" = 3 ] || { echo "FAIL: the 2-rank run to stop exited $rc, expected 3"; cat "$work/stopped.out"; exit 1; }
echo "ok: 2 ranks: 12 iterations uninterrupted; stopped at iteration 6"

for case in "1 global_batch one" "3 global_batch three" "3 batch_per_gpu three_per_gpu"; do
  read -r ranks mode name <<<"$case"
  config "$name" "$mode"
  resume_from_stop "$name"
  train "$ranks" "$name"
  [ "$rc" = 0 ] || { echo "FAIL: the resume on $ranks ranks ($mode) exited $rc"; cat "$work/$name.out"; exit 1; }
  grep -q "resume: resumed on another world size: $ranks rank(s), the checkpoint's run had 2" "$work/$name.out" ||
    { echo "FAIL: the resume on $ranks ranks does not say it resumed on another world size"; cat "$work/$name.out"; exit 1; }
done

$py - "$work" <<'PY' || { echo "FAIL: see above"; exit 1; }
import glob, json, sys
work = sys.argv[1]

def steps(name):
    """iteration -> (multiset of images over the ranks, schedule values, ranks seen)"""
    out = {}
    for f in glob.glob(f"{work}/{name}/samples/rank*.jsonl"):
        for line in open(f):
            s = json.loads(line)
            images, sched, ranks = out.setdefault(s["iteration"], ([], None, set()))
            images.extend(s["samples"])
            values = (s["lr"], s["weight_decay"], s["momentum"], s["teacher_temp"])
            assert sched in (None, values), f"{name}: ranks disagree on the schedules at iteration {s['iteration']}"
            ranks.add(s["rank"])
            out[s["iteration"]] = (images, values, ranks)
    return out

full, stopped = steps("full"), steps("stopped")
assert sorted(full) == list(range(12)), f"uninterrupted run: iterations {sorted(full)}"
assert sorted(stopped) == list(range(6)), f"stopped run: iterations {sorted(stopped)}"
for name, ranks in (("one", 1), ("three", 3)):
    resumed = steps(name)
    assert sorted(resumed) == list(range(6, 12)), f"{name}: iterations {sorted(resumed)}, expected 6-11"
    for it, (images, values, seen) in resumed.items():
        assert len(seen) == ranks, f"{name}: iteration {it} logged by ranks {seen}"
        assert sorted(images) == sorted(full[it][0]), f"{name}: iteration {it} trained on {sorted(images)}, the uninterrupted run on {sorted(full[it][0])}"
        assert values == full[it][1], f"{name}: iteration {it} schedules {values}, uninterrupted {full[it][1]}"
    print(f"ok: resumed on {ranks} rank(s), global batch kept: iterations 6-11 take the uninterrupted run's images and schedule values")

# Per-rank batch kept: 3 x 6 = 18 a step, 48 // 18 = 2 steps an epoch. The
# stop came after 24 images of epoch 2 (index 1): 24 are left, one step of
# 18 takes them (iteration 3 = epoch 1's second step), 6 stay out.
per_gpu = steps("three_per_gpu")
assert sorted(per_gpu) == [3, 4, 5], f"per-rank batch kept: iterations {sorted(per_gpu)}, expected 3-5"
before = [i for it in (4, 5) for i in stopped[it][0]]
epoch2_rest = set(range(48)) - set(before)
after = per_gpu[3][0]
assert len(after) == 18 and len(set(after)) == 18, f"epoch 2 after the resume: {sorted(after)}"
assert not set(after) & set(before), f"images trained on twice in epoch 2: {sorted(set(after) & set(before))}"
assert set(after) <= epoch2_rest and len(epoch2_rest - set(after)) < 18, f"left out of epoch 2: {sorted(epoch2_rest - set(after))}"
for it in (4, 5):
    assert len(set(per_gpu[it][0])) == 18, f"iteration {it}: {sorted(per_gpu[it][0])}"
assert set(per_gpu[4][0]).isdisjoint(per_gpu[5][0]), "epoch 3 takes an image twice"
assert per_gpu[3][1][3] == full[6][1][3] and per_gpu[4][1][3] == full[8][1][3], "teacher temperature of another epoch"
print("ok: resumed on 3 ranks, per-rank batch kept: the 24 images of epoch 2 not trained on yet come once (18, the"
      " rest less than a batch), then 2 steps of 18 an epoch")
PY

# Five ranks cannot share a global batch of 12: refused before any rendezvous.
config five
resume_from_stop five
out=$(env -u SLURM_PROCID -u SLURM_NTASKS RANK=0 WORLD_SIZE=5 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
  timeout 60 "$trainer" --config "$work/five.yaml" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "cannot resume on 5 ranks with the global batch kept (scdino.elastic_resume: global_batch): 5 does not divide the checkpoint's global batch 12 (2 ranks x 6). Resume on 1, 2, 3, 4, 6, 12 ranks" <<<"$out" ||
  { echo "FAIL: a resume on 5 ranks was not refused as expected ($rc): $out"; exit 1; }
echo "ok: a resume on 5 ranks with the global batch kept is refused naming the numbers (exit 2)"
