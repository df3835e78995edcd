#!/usr/bin/env bash
# Packed against folder data sets (docs/data.md#measured): 100,000 synthetic
# 50 x 50 x 5 cells (scdino-synth) as TIFF files in class folders and packed
# by scdino-pack; the pack's time, files and bytes; images/s of the loader
# from a cold page cache over a whole epoch (reading, decoding,
# preprocessing and batching, with minimal crops so that reading is what is
# timed; indexing included), and with scDINO's full multi-crop (2 x 224 +
# 8 x 96) cold and warm. Dropping the page cache needs root; without it the
# "cold" figures are warm ones and the script says so.
#
#   bash bench/run-pack-bench.sh [DATA_DIR] [IMAGES]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/bench-data/pack}
images=${2:-100000}
bash scripts/setup.sh scdino-synth scdino-pack scdino-bench-data
bin=build
cells="$dir/cells$images"
packed="$dir/packed$images"
mkdir -p "$dir"
if [ ! -d "$cells" ]; then
  "$bin/services/tools/scdino-synth" --out "$cells" --classes 10 --per-class $((images / 10)) --channels 5 --size 50 --seed 1
fi
cat > "$dir/pack.yaml" <<YAML
meta: {dataset_dir: "$(cd "$cells" && pwd)", output_dir: "$(cd "$dir" && pwd)/runs", name_of_run: pack-bench}
YAML
cold=1
if [ "$(id -u)" != 0 ]; then
  echo "not root: cannot drop the page cache; every figure below is from a warm cache" >&2
  cold=0
fi
drop() { [ "$cold" = 0 ] || { sync; echo 3 > /proc/sys/vm/drop_caches; }; }

rm -rf "$packed"
drop
t0=$(date +%s.%N)
"$bin/services/tools/scdino-pack" --config "$dir/pack.yaml" --out "$packed" --threads 2 2>/dev/null
t1=$(date +%s.%N)
python3 -c "import json,sys; print(json.dumps({'pack_seconds': float(sys.argv[2]) - float(sys.argv[1]), 'cold_cache': sys.argv[3] == '1'}))" "$t0" "$t1" "$cold"
for d in "$cells" "$packed"; do
  python3 -c "import json,sys; print(json.dumps({'set': sys.argv[1], 'files': int(sys.argv[2]), 'bytes': int(sys.argv[3])}))" \
    "$(basename "$d")" "$(find "$d" -type f | wc -l)" "$(du -sb "$d" | cut -f1)"
done
bench="$bin/bench/scdino-bench-data"
read_only=(--global 16 --local 8 --local-crops 0)
out="$dir/pack-bench.jsonl"
: > "$out"
for run in 1 2 3; do
  # A whole epoch from a cold cache, minimal crops: the reading path.
  "$bench" --data "$cells" --batches 0 --drop-caches "$cold" "${read_only[@]}" | tee -a "$out"
  "$bench" --data "$packed" --batches 0 --drop-caches "$cold" "${read_only[@]}" | tee -a "$out"
  "$bench" --data "$packed" --batches 0 --drop-caches "$cold" "${read_only[@]}" --shuffle global | tee -a "$out"
  # scDINO's full multi-crop, 150 batches of 32, cold and warm.
  for d in "$cells" "$packed"; do
    "$bench" --data "$d" --batches 150 --drop-caches "$cold" | tee -a "$out"
    "$bench" --data "$d" --batches 150 | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = {}
for r in rows:
    key = (r["crops"], r["cold_cache"], r["source"], r["shuffle"])
    groups.setdefault(key, []).append(r)
print("| crops | cache | set | shuffle | images/s (median of %d) | with indexing | runs |" % min(len(v) for v in groups.values()))
print("|---|---|---|---|---|---|---|")
for (crops, cold, source, shuffle), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "2x16 + 0x8", not kv[0][1], kv[0][2], kv[0][3])):
    ips = [r["images_per_s"] for r in rs]
    idx = [r["images_per_s_with_index"] for r in rs]
    print(f"| {crops} | {'cold' if cold else 'warm'} | {source} | {shuffle} | {statistics.median(ips):.0f} | "
          f"{statistics.median(idx):.0f} | {', '.join(f'{v:.0f}' for v in ips)} |")
PY
