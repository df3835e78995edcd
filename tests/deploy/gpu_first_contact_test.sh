#!/usr/bin/env bash
# scripts/gpu-bench.sh (the one prepared run for a lent GPU) rehearsed on
# this CPU-only build: every section runs at a tiny size from the build tree
# and leaves its figures in the summary, so the script works the day it
# meets a GPU. Also holds what the step must not regress to: at most one
# host synchronisation a step, ours and the trainer's.
#   tests/deploy/gpu_bench_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" gpu-bench "$1" "$2"
bash "$src/scripts/gpu-bench.sh" --rehearse --build-dir "$build" --out "$work/rehearse" >"$work/rehearse.out" 2>&1 ||
  { cat "$work/rehearse.out"; echo "FAIL: gpu-bench --rehearse failed"; exit 1; }
cat "$work/rehearse/summary.md"
/usr/bin/python3 - "$work/rehearse/summary.jsonl" <<'PY' || echo "FAIL: the rehearsal's summary lacks figures (above)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def need(cond, what):
    if not cond:
        print("missing: " + what)
        sys.exit(1)
ends = {r["section"]: r["end"] for r in rows if "end" in r}
for s in ["versions", "step-2", "step-4", "pytorch", "data", "features"]:
    need(ends.get(s) == "ok", "section %s ended %s" % (s, ends.get(s)))
need(ends.get("compile", "").startswith("skipped") or ends.get("compile") == "ok", "the compile section")
steps = [r for r in rows if r.get("step") == "dino"]
need(len(steps) == 2 and all(r["images_per_s"] > 0 and r["aten_ops_per_step"] > 0 for r in steps), "our steps' figures")
need(all(r["host_syncs_per_step"] <= 1 for r in steps), "at most one host sync a step (Dino::Step)")
trainer = [r for r in rows if r.get("step") == "trainer"]
need(trainer and "data_wait_share" in trainer[0] and trainer[0]["host_syncs_per_step"] <= 1,
     "the trainer's step: its data wait, at most one host sync a step")
py = [r for r in rows if r.get("benchmark") == "python_train_step"]
need(py and py[0]["images_per_s"] > 0 and "aten_ops_per_step" in py[0], "the PyTorch step beside ours")
need([r for r in rows if r.get("benchmark") == "features" and r["images_per_s"] > 0], "features")
PY
grep -q "against the faster PyTorch step" "$work/rehearse/summary.md" || echo "FAIL: no ratio against PyTorch"
grep -q "Multi-GPU NCCL: not measured" "$work/rehearse/summary.md" || echo "FAIL: the summary does not say multi-GPU is not measured"
echo "ok: gpu-bench rehearsed on the CPU"
