#!/usr/bin/env bash
# The README example's training on one and on two threads, interleaved
# (the shared machines this runs on move by up to 30 % within minutes: only
# runs side by side compare). Each round trains configs/small-data.yaml
# (vit_tiny/8, batch 32, 2 x 48 + 4 x 24 crops, 5 channels, the example's
# 512 TIFF cells) for EPOCHS epochs with --threads 1, then with --threads 2,
# each into a fresh run directory; a run's figure is the images/s of its
# epochs after the first (the first holds the statistics and the warm-up).
# The table gives each round, the medians and 2 threads / 1 thread, and the
# threads each run's step saw (log.jsonl's cpu_threads).
#
#   bash bench/example_threads.sh [BUILD_DIR] [ROUNDS] [EPOCHS]
#   BUILD_DIR: a build with scdino-trainer and scdino-synth (default build)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${2:-3}
epochs=${3:-4}
trainer=$build/services/trainer/scdino-trainer
for p in "$trainer" "$build/services/tools/scdino-synth"; do
  [ -x "$p" ] || { echo "example_threads.sh: $p is not built (bash scripts/setup.sh)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The example's data set, as scripts/run-example.sh makes it.
"$build/services/tools/scdino-synth" --out "$work/cells" --classes 4 --per-class 128 --channels 5 --size 50 \
    --seed 7 --difficulty 0.6 > /dev/null
sed -e "s|^  output_dir: .*|  output_dir: \"$work/runs\"|" -e "s|^  dataset_dir: .*|  dataset_dir: \"$work/cells\"|" \
    -e "s|^  epochs: .*|  epochs: $epochs|" -e "s|^  saveckp_freq: .*|  saveckp_freq: $epochs|" \
    "$src/configs/small-data.yaml" > "$work/base.yaml"
grep -q "epochs: $epochs" "$work/base.yaml" || { echo "example_threads.sh: no epochs key in configs/small-data.yaml" >&2; exit 2; }
# images/s of the epochs after the first, and the threads the step saw.
figure() {
  /usr/bin/python3 -c '
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
later = [l for l in lines if l["epoch"] >= 1]
print("%.2f %s" % (statistics.mean(l["images_per_s"] for l in later),
                   ",".join(sorted({str(l.get("cpu_threads", "?")) for l in lines}))))' "$1"
}
results=()
for r in $(seq 1 "$rounds"); do
  row=""
  for t in 1 2; do
    sed "s|^  name_of_run: .*|  name_of_run: \"r$r-t$t\"|" "$work/base.yaml" > "$work/r$r-t$t.yaml"
    "$trainer" --config "$work/r$r-t$t.yaml" --threads "$t" > "$work/r$r-t$t.out" 2>&1 ||
      { tail -20 "$work/r$r-t$t.out" >&2; exit 1; }
    row+="$(figure "$work/runs/r$r-t$t/log.jsonl") "
  done
  echo "round $r: $row" >&2
  results+=("$row")
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
print("| round | --threads 1: images/s (step saw) | --threads 2: images/s (step saw) | 2 / 1 |")
print("|---|---|---|---|")
for i, (a, ta, b, tb) in enumerate(rows, 1):
    print("| %d | %.2f (%s) | %.2f (%s) | %.2fx |" % (i, float(a), ta, float(b), tb, float(b) / float(a)))
one = statistics.median(float(r[0]) for r in rows)
two = statistics.median(float(r[2]) for r in rows)
ratio = statistics.median(float(r[2]) / float(r[0]) for r in rows)
print("| median | %.2f | %.2f | %.2fx |" % (one, two, ratio))
'
