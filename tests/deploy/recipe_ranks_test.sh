#!/usr/bin/env bash
# The README's recipe as shipped (configs/small-data.yaml: Sinkhorn-Knopp
# teacher targets and KoLeo) on two ranks of the real trainer binary, as a
# user launches it: deploy/slurm/train.sbatch with 2 tasks on the test
# Slurm, and two processes with torchrun-style variables. Each runs 2 epochs
# and 2 iterations of the recipe on the example's data set (Gloo), then
# stops with a checkpoint (--stop-after-iterations); the two launches end
# with the same weights (same seed, same global batch, same world size).
#   tests/deploy/recipe_ranks_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" recipe-ranks "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
config="$src/configs/small-data.yaml"
trainer="$build/services/trainer/scdino-trainer"
stop=20  # 512 images, 2 x 32 a step: 8 iterations an epoch

# The example's data set, as scripts/run-example.sh writes it; the config's
# relative paths (data/example, runs) are taken from each launch's directory.
mkdir -p "$work/slurm/data" "$work/torchrun"
"$build/services/tools/scdino-synth" --out "$work/slurm/data/example" --classes 4 --per-class 128 --channels 5 \
  --size 50 --seed 7 --difficulty 0.6 > /dev/null
ln -s ../slurm/data "$work/torchrun/data"

checked() {  # checked RUN_DIR OUTPUT...: the run stopped after $stop iterations with 2 epoch lines
  local run=$1
  shift
  local it
  it=$($py - "$run/checkpoint.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
m = json.loads(b[8:8 + n])['__metadata__']
print(m['iteration'], m['world_size'])
PY
) || { echo "FAIL: no checkpoint in $run"; cat "$@"; exit 1; }
  [ "$it" = "$stop 2" ] || { echo "FAIL: checkpoint of $run is at iteration/world size $it, expected $stop 2"; cat "$@"; exit 1; }
  [ "$(wc -l < "$run/log.jsonl")" = 2 ] || { echo "FAIL: $run/log.jsonl has not 2 epoch lines"; cat "$@"; exit 1; }
  $py - "$run/log.jsonl" <<'PY' || { echo "FAIL: a non-finite loss in $run/log.jsonl"; exit 1; }
import json, math, sys
for line in open(sys.argv[1]):
    assert math.isfinite(json.loads(line)["loss"]), line
PY
}

# 1. The test Slurm: sbatch -n 2 train.sbatch with the shipped config.
job=$(sbatch --parsable --ntasks=2 --cpus-per-task=1 --chdir="$work/slurm" --output="$work/slurm/job-%j.out" \
  --export=ALL,SCDINO_BIN="$build/services/trainer" "$src/deploy/slurm/train.sbatch" "$config" --stop-after-iterations $stop)
for _ in $(seq 1 600); do
  squeue -h -j "$job" 2>/dev/null | grep -q . || break
  sleep 1
done
out=$(ls "$work"/slurm/job-*.out)
grep -q "rank 1 of 2, gloo (slurm launch" "$out" || { echo "FAIL: no 2-rank Slurm launch"; cat "$out"; exit 1; }
! grep -q "Tensors must have same number of dimensions" "$out" || { echo "FAIL: the rank exchange crashed"; cat "$out"; exit 1; }
checked "$work/slurm/runs/example" "$out"
echo "ok: sbatch -n 2 deploy/slurm/train.sbatch configs/small-data.yaml: $stop iterations on 2 Gloo ranks"

# 2. torchrun-style variables: two processes on loopback.
port=$((21000 + $$ % 11000))
pids=()
for r in 0 1; do
  (cd "$work/torchrun" && RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
     exec "$trainer" --config "$config" --threads 1 --stop-after-iterations $stop) > "$work/torchrun/rank$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  rc=0; wait "${pids[$r]}" || rc=$?
  [ "$rc" = 3 ] || { echo "FAIL: torchrun-style rank $r exited $rc, expected 3 (--stop-after-iterations)"; cat "$work/torchrun/rank$r.out"; exit 1; }
done
grep -q "rank 1 of 2, gloo (torchrun launch" "$work/torchrun/rank1.out" || { echo "FAIL: no torchrun-style launch"; cat "$work/torchrun/rank1.out"; exit 1; }
checked "$work/torchrun/runs/example" "$work/torchrun/rank0.out" "$work/torchrun/rank1.out"
echo "ok: RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT: $stop iterations on 2 Gloo ranks"

# Both launches took the same steps: identical weights, teacher and optimizer state.
$py - "$work/slurm/runs/example/checkpoint.safetensors" "$work/torchrun/runs/example/checkpoint.safetensors" <<'PY' ||
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]: 8 + n + v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
bad = [k for k in a if a[k] != b[k]]
assert not bad, bad[:5]
PY
  { echo "FAIL: the Slurm and torchrun-style launches of the same run differ"; exit 1; }
echo "ok: the two launches end with identical checkpoints"
