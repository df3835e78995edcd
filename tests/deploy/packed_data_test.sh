#!/usr/bin/env bash
# Packed data sets on the test Slurm, with the real binaries:
#   1. scdino-pack on 2 tasks (srun) packs 48 TIFF cells into 3 shards, the
#      last task to finish writes the index; a rerun keeps every shard; the
#      shards are tar files of .npy/.cls members that Python's tarfile and
#      numpy read, each image's CRC-32 as index.csv gives it.
#   2. A training on the packed set (shuffle: global), stopped inside its
#      first epoch and resumed, trains on the same images at every step with
#      the same losses as the same run on the folders.
#   3. train.sbatch stages the packed set to node-local storage (once per
#      node, verified), the trainer reads that copy (shuffle: blocks), and a
#      second job reuses it; a node that cannot stage reads the shared copy
#      with a warning.
#   4. scdino-features gives the same CLS features for the packed set as for
#      its folders.
#   5. A corrupt byte in a shard stops the service naming the shard, the
#      offset and the image (exit 2); mixed channel counts stop the packing
#      naming the file.
#   tests/deploy/packed_data_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" packed-data "$1" "$2"
sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated' || { echo "FAIL: no Slurm cluster (scripts/slurm-local.sh)"; exit 1; }
tools="$build/services/tools"
trainer="$build/services/trainer/scdino-trainer"
features="$build/services/features/scdino-features"
"$tools/scdino-synth" --out "$work/cells" --classes 3 --per-class 16 --channels 2 --size 20 --seed 5 >/dev/null

config() {  # NAME DATASET_DIR [SCDINO_LINE]: a config whose run directory is $work/runs/NAME
  cat > "$work/$1.yaml" <<YAML
meta: {name_of_run: $1, output_dir: "$work/runs", dataset_dir: "$2", seed: 7, selected_channel_combination_per_run: ["01"]}
train_scDINO:
  epochs: 2
  saveckp_freq: 10
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  log_every: 1
  control: {enabled: false}
  metrics: {enabled: false}
  log_samples: true
  ${3:-}
YAML
}

# 1. Packing on 2 tasks, then a rerun on 1.
config folder "$work/cells"
srun --ntasks=2 --overcommit --cpus-per-task=1 --kill-on-bad-exit=1 --chdir="$work" \
  "$tools/scdino-pack" --config "$work/folder.yaml" --out "$work/packed" --shard-images 16 --block 8 \
  > "$work/pack.out" 2>&1 || { echo "FAIL: scdino-pack on 2 tasks failed"; cat "$work/pack.out"; exit 1; }
# Each task ends saying either that it left the index to another or that
# the set is complete; at least one completes it. Two that finish together
# both find every shard there and both write the index (atomically, the
# same bytes): the unit tests take the one-task-leaves-it path apart.
[ "$(grep -c -e "shard(s) left to other tasks, the last to finish writes" \
      -e "$work/packed is complete: point meta.dataset_dir at it" "$work/pack.out")" = 2 ] &&
  grep -q "$work/packed is complete: point meta.dataset_dir at it" "$work/pack.out" ||
  { echo "FAIL: each task should end leaving the index to another or completing the set, one at least completing it"
    cat "$work/pack.out"; exit 1; }
"$tools/scdino-pack" --config "$work/folder.yaml" --out "$work/packed" --shard-images 16 --block 8 > "$work/repack.out" 2>&1 &&
  grep -q "0 shard(s) written (0 images, 0 MiB), 3 already there" "$work/repack.out" ||
  { echo "FAIL: a rerun should keep the 3 shards"; cat "$work/repack.out"; exit 1; }
$py - "$work/packed" <<'PY' || { echo "FAIL: the packed set as outside tools read it"; exit 1; }
import csv, io, json, sys, tarfile, zlib
import numpy as np
d = sys.argv[1]
pack = json.load(open(f"{d}/pack.json"))
rows = list(csv.DictReader(open(f"{d}/index.csv")))
assert pack["samples"] == 48 and len(rows) == 48 and len(pack["shards"]) == 3, (pack["samples"], len(rows))
assert pack["classes"] == ["class_0", "class_1", "class_2"] and pack["channels"] == 2 and pack["dtype"] == "uint8", pack
for r in rows:
    with open(f"{d}/{pack['shards'][int(r['shard'])]['file']}", "rb") as f:
        f.seek(int(r["offset"]))
        b = f.read(int(r["bytes"]))
    assert "%08x" % zlib.crc32(b) == r["crc32"], r
    a = np.load(io.BytesIO(b))
    assert a.shape == (20, 20, 2) and a.dtype == np.uint8, (a.shape, a.dtype)
    assert r["path"].startswith(r["class"] + "/"), r
# WebDataset's convention: <key>.npy and <key>.cls per image.
with tarfile.open(f"{d}/shard-00000.tar") as t:
    names = t.getnames()
    assert names[:2] == ["000000000.npy", "000000000.cls"] and len(names) == 32, names[:4]
    first = next(r for r in rows if r["position"] == "0")
    assert t.extractfile("000000000.cls").read().decode() == first["label"]
print("ok: 48 images in 3 shards; index rows, CRC-32s, .npy and .cls members read by Python")
PY
echo "ok: packed on 2 tasks; the rerun kept every shard"

# 2. Folders and packed set, each stopped at iteration 5 and resumed.
config packed "$work/packed" "shuffle: global"
for name in folder packed; do
  "$trainer" --config "$work/$name.yaml" --stop-after-iterations 5 > "$work/$name-1.out" 2>&1 && rc=0 || rc=$?
  [ "$rc" = 3 ] || { echo "FAIL: $name: the first part exited $rc, expected 3"; cat "$work/$name-1.out"; exit 1; }
  "$trainer" --config "$work/$name.yaml" > "$work/$name-2.out" 2>&1 ||
    { echo "FAIL: $name: the resumed run failed"; cat "$work/$name-2.out"; exit 1; }
done
$py - "$work/runs" <<'PY' || { echo "FAIL: the packed run differs from the folder run"; exit 1; }
import json, sys
runs = sys.argv[1]
def samples(name):
    return [(s["iteration"], s["samples"]) for s in map(json.loads, open(f"{runs}/{name}/samples/rank0.jsonl"))]
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{runs}/{name}/log.jsonl")]
a, b = samples("folder"), samples("packed")
assert [i for i, _ in a] == list(range(24)), [i for i, _ in a]
assert a == b, next((x, y) for x, y in zip(a, b) if x != y)
assert losses("folder") == losses("packed") and len(losses("folder")) >= 2, (losses("folder"), losses("packed"))
print("ok: 24 steps (stopped at 5, resumed): the same images at every step and the same losses", losses("packed"))
PY

# 3. train.sbatch stages the set to node-local storage; a second job reuses it.
config staged "$work/packed"
submit_train staged SCDINO_PREFLIGHT=0,SCDINO_STAGE_DIR="$work/local"
[ "$code" = 0 ] || { echo "FAIL: the staged training job exited $code"; cat "$out"; exit 1; }
# One copy per pack, named by the fingerprint of its pack.json.
fp=$(basename "$(ls -d "$work"/local/*/)")
cmp -s "$work/local/$fp/pack.json" "$work/packed/pack.json" && [ -f "$work/local/$fp/.staged" ] ||
  { echo "FAIL: no verified copy under $work/local"; ls -laR "$work/local"; exit 1; }
grep -q "scdino-pack: staged and verified $work/local/$fp: 0 MiB in .* s on $(hostname)" "$out" &&
  grep -q "scdino: staging step took [0-9]* s" "$out" &&
  [ "$(grep -c "scdino: reading $work/packed from its copy on this node, $work/local/$fp" "$out")" = 2 ] ||
  { echo "FAIL: the job should stage once and both ranks read the node's copy"; cat "$out"; exit 1; }
grep -q "^scdino_pack_staging_seconds{slurm_job_id=\"[0-9]*\",node=\"$(hostname)\"} " "$work/textfile/scdino-stage.prom" ||
  { echo "FAIL: no staging time in the node_exporter textfile"; cat "$work/textfile/scdino-stage.prom"; exit 1; }
config staged2 "$work/packed"
submit_train staged2 SCDINO_PREFLIGHT=0,SCDINO_STAGE_DIR="$work/local"
[ "$code" = 0 ] && grep -q "scdino-pack: reused the verified copy $work/local/$fp" "$out" ||
  { echo "FAIL: a second job should reuse the staged copy (exit $code)"; cat "$out"; exit 1; }
config unstaged "$work/packed"
submit_train unstaged SCDINO_PREFLIGHT=0,SCDINO_STAGE_DIR=/proc/scdino-cannot-stage-here
[ "$code" = 0 ] &&
  grep -q "scdino: warning: staging the data set to /proc/scdino-cannot-stage-here failed" "$out" &&
  grep -q "scdino: warning: no verified copy of $work/packed under SCDINO_STAGE_DIR=/proc/scdino-cannot-stage-here on $(hostname); reading the shared copy" "$out" ||
  { echo "FAIL: a node that cannot stage should train from the shared copy with a warning (exit $code)"; cat "$out"; exit 1; }
# A folder of images has nothing to stage: no staging step at all.
config folders "$work/cells"
submit_train folders SCDINO_PREFLIGHT=0,SCDINO_STAGE_DIR="$work/local"
[ "$code" = 0 ] && grep -qF "scdino: no staging step: the data set ($work/cells) is not a packed set" "$out" &&
  ! grep -q -e "scdino-pack:" -e "staging step took" "$out" ||
  { echo "FAIL: a folder data set should train with no staging step (exit $code)"; cat "$out"; exit 1; }
echo "ok: train.sbatch staged the set once per node, the ranks read the copy, a second job reused it, a failed staging fell back, a folder ran no staging step"

# 4. The same CLS features from the packed set as from the folders; read
# from the node's copy, the features still name the shared set's paths.
for name in folder packed; do
  SCDINO_STAGE_DIR="$work/local" "$features" --config "$work/$name.yaml" --random-init > /dev/null 2> "$work/features-$name.err" ||
    { echo "FAIL: scdino-features on $name failed"; tail -5 "$work/features-$name.err"; exit 1; }
done
grep -q "scdino: reading $work/packed from its copy on this node, $work/local/$fp" "$work/features-packed.err" ||
  { echo "FAIL: scdino-features did not read the staged copy"; cat "$work/features-packed.err"; exit 1; }
! grep -q "$work/local" "$work/runs/packed/features/random_init/index.csv" ||
  { echo "FAIL: the features' index names the node-local copy"; head -3 "$work/runs/packed/features/random_init/index.csv"; exit 1; }
$py - "$work/runs" <<'PY' || { echo "FAIL: features differ"; exit 1; }
import sys, csv
import numpy as np
r = sys.argv[1]
a, b = np.load(f"{r}/folder/features/random_init/features.npy"), np.load(f"{r}/packed/features/random_init/features.npy")
assert a.shape == (48, 32) and np.array_equal(a, b), (a.shape, b.shape, np.abs(a - b).max())
def rows(name):  # the image's path below its set, class and split
    out = []
    for x in csv.DictReader(open(f"{r}/{name}/features/random_init/index.csv")):
        out.append((x["path"].split("/cells/" if name == "folder" else "/packed/")[1], x["class_index"], x["split"]))
    return out
assert rows("folder") == rows("packed"), (rows("folder")[:2], rows("packed")[:2])
print("ok: scdino-features: the packed set's 48 CLS features equal the folders'")
PY

# 5. Bad input: a corrupt shard byte; mixed channel counts.
$py - "$work/packed" <<'PY'
import csv, json, sys
d = sys.argv[1]
row = next(r for r in csv.DictReader(open(f"{d}/index.csv")) if r["path"] == "class_1/cell_00003.tif")
shard = json.load(open(f"{d}/pack.json"))["shards"][int(row["shard"])]["file"]
with open(f"{d}/{shard}", "r+b") as f:
    f.seek(int(row["offset"]) + int(row["bytes"]) - 3)
    c = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([c[0] ^ 0xff]))
open(f"{d}/corrupted", "w").write(f"{shard} offset {row['offset']}")
PY
rm -rf "$work/runs/packed/features"
"$features" --config "$work/packed.yaml" --random-init > /dev/null 2> "$work/corrupt.err" && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "$(cat "$work/packed/corrupted") ($work/packed/class_1/cell_00003.tif): CRC-32 mismatch" "$work/corrupt.err" ||
  { echo "FAIL: a corrupt shard should stop scdino-features (exit 2) naming shard, offset and image; exit $rc"; cat "$work/corrupt.err"; exit 1; }
"$tools/scdino-synth" --out "$work/mixed" --classes 1 --per-class 3 --channels 2 --size 20 --seed 1 >/dev/null
"$tools/scdino-synth" --out "$work/mixed3" --classes 1 --per-class 1 --channels 3 --size 20 --seed 1 >/dev/null
cp "$work/mixed3/class_0/cell_00000.tif" "$work/mixed/class_0/three.tif"
config mixed "$work/mixed"
"$tools/scdino-pack" --config "$work/mixed.yaml" --out "$work/mixed-packed" > "$work/mixed.out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "three.tif" "$work/mixed.out" && grep -q "a packed set holds one channel count and sample type" "$work/mixed.out" &&
  [ ! -e "$work/mixed-packed/pack.json" ] ||
  { echo "FAIL: mixed channel counts should stop the packing naming the file (exit $rc)"; cat "$work/mixed.out"; exit 1; }
echo "ok: a corrupt byte named its shard, offset and image; mixed channel counts named the file"
