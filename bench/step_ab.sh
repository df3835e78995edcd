#!/usr/bin/env bash
# Two builds of the CPU training step against each other and against
# facebookresearch/dino's step, interleaved in one session (the shared VMs
# this runs on move every side by up to 30 % within minutes: only runs side
# by side compare). Each round runs A, B and the Python step once; the
# table gives each run and the medians, and B/A and B/PyTorch.
#
#   bash bench/step_ab.sh A_BENCH B_BENCH [ROUNDS]
#   A_BENCH, B_BENCH: two scdino-bench-train-step programs (a build of an
#   earlier commit and this one: docs/performance.md says how they were made)
#
# The step: vit_tiny/16, batch 8, 2 x 224 + 8 x 96 crops, out_dim 65536, 5
# channels, 2 threads, 3 timed steps after 1 warm-up; the Python step with
# OMP_WAIT_POLICY=PASSIVE, its best (docs/performance.md).
set -euo pipefail
a=${1:?usage: step_ab.sh A_BENCH B_BENCH [ROUNDS]}
b=${2:?usage: step_ab.sh A_BENCH B_BENCH [ROUNDS]}
rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
ours=(--arch vit_tiny --patch 16 --channels 5 --global 224 --local 96 --local-crops 8 --batch 8 --out-dim 65536
      --steps 3 --warmup 1 --threads 2)
py=(--arch vit_tiny --patch 16 --channels 5 --global-size 224 --local-size 96 --local-crops 8 --batch 8
    --out-dim 65536 --steps 3 --warmup 1 --threads 2)
rate() { sed -n 's/.*"images_per_s": *\([0-9.]*\).*/\1/p' | tail -1; }
results=()
for r in $(seq 1 "$rounds"); do
  ra=$("$a" "${ours[@]}" | rate)
  rb=$("$b" "${ours[@]}" | rate)
  rp=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$src/bench/python_train_step.py" "${py[@]}" | rate)
  echo "round $r: A $ra, B $rb, PyTorch $rp images/s" >&2
  results+=("$ra $rb $rp")
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
print("| round | A images/s | B images/s | PyTorch images/s | B / A | B / PyTorch | A / PyTorch |")
print("|---|---|---|---|---|---|---|")
for i, (a, b, p) in enumerate(rows, 1):
    print("| %d | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx |" % (i, a, b, p, b / a, b / p, a / p))
med = [statistics.median(c) for c in zip(*rows)]
ratios = [statistics.median(r[1] / r[0] for r in rows), statistics.median(r[1] / r[2] for r in rows),
          statistics.median(r[0] / r[2] for r in rows)]
print("| median | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx |" % (*med, *ratios))
'
