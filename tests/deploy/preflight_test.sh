#!/usr/bin/env bash
# scdino-preflight as the first step of deploy/slurm/train.sbatch on the test
# Slurm (2 tasks, Gloo): it prints the all-reduce table (nccl-tests' columns),
# writes preflight.json and preflight.prom (and the node_exporter textfile in
# $SCDINO_TEXTFILE_DIR), and the trainer then runs. With
# thresholds above what this machine can do (bus bandwidth, free space) the
# job ends with exit 6 before the trainer starts, each failure naming the
# figure, the node and the key. A threshold of the wrong type is refused
# naming the key (exit 2).
#   tests/deploy/preflight_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" preflight "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
"$build/services/tools/scdino-synth" --out "$work/data" --classes 2 --per-class 40 --channels 2 --size 16 --seed 3 >/dev/null

config() {  # NAME PREFLIGHT_MAPPING
  cat > "$work/$1.yaml" <<YAML
meta: {name_of_run: $1, output_dir: "$work/runs", dataset_dir: "$work/data", seed: 2, selected_channel_combination_per_run: ["01"]}
train_scDINO:
  epochs: 2
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  control: {enabled: false}
  metrics: {enabled: false}
  preflight: $2
YAML
}
# 1. Thresholds this machine meets: the table, the report, then training.
config pass "{max_bytes: 4194304, seconds_per_size: 0.2, read_files: 40}"
submit_train pass "" --stop-after-iterations 2
grep -q "^# all-reduce (sum, float) over 2 ranks, gloo" "$out" && grep -qE "^ +4194304 +1048576 +float" "$out" ||
  { echo "FAIL: no all-reduce table up to 4 MiB"; cat "$out"; exit 1; }
grep -q "scdino-preflight: passed on 2 rank(s): all-reduce busbw" "$out" || { echo "FAIL: no passed line"; cat "$out"; exit 1; }
grep -q "scdino-trainer: stopped after iteration 2" "$out" || { echo "FAIL: the trainer did not run after the preflight"; cat "$out"; exit 1; }
$py - "$work/runs/pass/preflight.json" "$work/runs/pass/preflight.prom" <<'PY' || { echo "FAIL: the preflight report"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["passed"] and r["world_size"] == 2 and r["backend"] == "gloo", r
sizes = [row["bytes"] for row in r["all_reduce"]]
assert sizes == [8, 64, 512, 4096, 32768, 262144, 2097152, 4194304], sizes
assert all(row["busbw_gbps"] > 0 for row in r["all_reduce"][2:]), r["all_reduce"]
assert [x["rank"] for x in r["ranks"]] == [0, 1], r["ranks"]
reader = [x for x in r["ranks"] if "read" in x]
assert len(reader) == 1 and reader[0]["read"]["files"] == 40 and reader[0]["read"]["mbps"] > 0, reader
assert all(x["free_gb"] > 0 for x in r["ranks"])
prom = open(sys.argv[2]).read()
assert 'scdino_preflight_passed{slurm_job_id="' in prom and "} 1\n" in prom, prom
print("ok: preflight.json: %d sizes, busbw %.3f GB/s at 4 MiB, %d files read at %.0f MB/s" % (
    len(sizes), r["all_reduce"][-1]["busbw_gbps"], reader[0]["read"]["files"], reader[0]["read"]["mbps"]))
PY
grep -q "^scdino_preflight_passed{slurm_job_id=\"[0-9]*\"} 1$" "$work/textfile/scdino-preflight.prom" ||
  { echo "FAIL: no node_exporter textfile in \$SCDINO_TEXTFILE_DIR"; ls -la "$work/textfile"; exit 1; }
[ "$code" = 3 ] || { echo "FAIL: the passing job exited $code, expected 3 (--stop-after-iterations)"; cat "$out"; exit 1; }

# 2. Thresholds above what the machine can do: exit 6, no training.
config fail "{max_bytes: 65536, seconds_per_size: 0.1, read_files: 0, min_busbw_gbps: 1000, min_free_gb: 1000000000}"
submit_train fail ""
grep -q "scdino-preflight: FAILED: all-reduce over $(hostname): bus bandwidth .* GB/s at 65536 B is below scdino.preflight.min_busbw_gbps 1000.000" "$out" &&
  grep -q "scdino-preflight: FAILED: $(hostname) (rank 0): .* GB free in $work/runs/fail, below scdino.preflight.min_free_gb 1000000000.00" "$out" ||
  { echo "FAIL: the failures are not named"; cat "$out"; exit 1; }
grep -q "scdino: the preflight ended with 6; not training" "$out" || { echo "FAIL: no 'not training' line"; cat "$out"; exit 1; }
! grep -q "scdino-trainer:" "$out" || { echo "FAIL: the trainer started after a failed preflight"; cat "$out"; exit 1; }
! grep -q "requeueing" "$out" || { echo "FAIL: a failed preflight was requeued"; cat "$out"; exit 1; }
[ "$code" = 6 ] || { echo "FAIL: the job exited $code, expected 6"; cat "$out"; exit 1; }
$py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert not r["passed"] and len(r["failures"]) == 3, r["failures"]' \
  "$work/runs/fail/preflight.json" || { echo "FAIL: preflight.json of the failed job"; exit 1; }
echo "ok: thresholds above this machine: exit $code before the trainer, failures named (bus bandwidth, free space on $(hostname))"

# 3. A threshold of the wrong type, e.g. with a unit in it.
config typo '{min_busbw_gbps: "25 GB/s"}'
err=$("$build/services/preflight/scdino-preflight" --config "$work/typo.yaml" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "scdino.preflight.min_busbw_gbps" <<<"$err" ||
  { echo "FAIL: a threshold with a unit was not refused naming the key ($rc): $err"; exit 1; }
echo "ok: min_busbw_gbps: \"25 GB/s\" is refused naming the key (exit 2): $(head -1 <<<"$err")"

# 4. Without --config (its --help: the defaults, run directory
# runs/preflight), two ranks met by the environment alone: the table.
mkdir -p "$work/noconfig"
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  (cd "$work/noconfig" && env -u SLURM_JOB_ID -u SLURM_PROCID -u SLURM_NTASKS WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
     LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 \
     "$build/services/preflight/scdino-preflight" --threads 1 > "$work/noconfig/rank$r.txt" 2>&1; echo $? > "$work/noconfig/rank$r.rc") &
done
wait
[ "$(cat "$work/noconfig/rank0.rc")" = 0 ] && [ "$(cat "$work/noconfig/rank1.rc")" = 0 ] &&
  grep -q "^# all-reduce (sum, float) over 2 ranks, gloo" "$work/noconfig/rank0.txt" &&
  grep -q "no --config" "$work/noconfig/runs/preflight/preflight.json" ||
  { echo "FAIL: scdino-preflight without --config on two ranks"; tail -n 20 "$work"/noconfig/rank*.txt; exit 1; }
echo "ok: without --config on two ranks: the all-reduce table, runs/preflight/preflight.json ($(grep -c '^ *[0-9]' "$work/noconfig/rank0.txt") sizes)"
