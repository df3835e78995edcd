#!/usr/bin/env bash
# scripts/gpu-first-contact.sh (the one prepared command for a lent GPU)
# rehearsed on this CPU-only build: every section runs at a tiny size from
# the test tree, the checks of the GPU against the CPU run on the CPU, and
# the figures land in the summary, so the command works the day it meets a
# GPU. Its boxes add up to less than the 540 s the command has. Also holds
# what the step must not regress to: at most one host synchronisation a
# step, ours and the trainer's.
#   tests/deploy/gpu_first_contact_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../support/lib.sh" gpu-first-contact "$1" "$2"
bash "$src/scripts/gpu-first-contact.sh" --rehearse "$work/out" --build-dir "$build" >"$work/rehearse.out" 2>&1 ||
  { cat "$work/rehearse.out"; echo "FAIL: gpu-first-contact --rehearse failed"; exit 1; }
cat "$work/out/summary.md"
files=$(find "$work/out" -type f | wc -l)
[ "$files" -le 8 ] || echo "FAIL: $files files in the output folder; at most 8 come back from the lent machine"
for f in summary.md summary.json first-contact.log inventory.txt; do
  [ -s "$work/out/$f" ] || echo "FAIL: no $f in the output folder"
done
/usr/bin/python3 - "$work/out/summary.json" <<'PY' || echo "FAIL: the rehearsal's summary lacks figures (above)"
import json, sys
d = json.load(open(sys.argv[1]))
def need(cond, what):
    if not cond:
        print("missing: " + what)
        sys.exit(1)
ends = {k: v["end"] for k, v in d["sections"].items()}
for s in ["inventory", "build", "parity", "trainer-steps", "nccl", "step-2", "step-4", "data", "features", "profile",
          "pytorch"]:
    need(ends.get(s) == "ok", "section %s ended %s" % (s, ends.get(s)))
plan = [f for f in d["figures"] if f["section"] == "plan"][0]
need(plan["boxes_seconds"] < 540 and plan["budget_seconds"] == 540,
     "the boxes under 540 s: %s of %s" % (plan["boxes_seconds"], plan["budget_seconds"]))
checks = {c["test"]: c for c in d["checks"]}
for t in ["DinoParity.TwoTrainingStepsMatchReferenceOnTheDeviceUnderTest",
          "DinoParity.Bf16StepLossWithinTwoPercentOfFloat32OnTheDeviceUnderTest",
          "DeviceCheck.FourTrainerStepsOnTheDeviceMatchTheCpu", "DeviceCheck.AOneRankProcessGroupFormsSumsAndAborts"]:
    need(t in checks and checks[t]["passed"], "the check " + t)
need(checks["DinoParity.TwoTrainingStepsMatchReferenceOnTheDeviceUnderTest"].get("adamw_path") == "cpu",
     "the AdamW path named")
figs = d["figures"]
steps = [r for r in figs if r.get("step") == "dino" and r["section"] != "profile"]
need(len(steps) == 2 and all(r["images_per_s"] > 0 and r["aten_ops_per_step"] > 0 for r in steps), "our steps' figures")
need(all(r["host_syncs_per_step"] <= 1 for r in steps), "at most one host sync a step (Dino::Step)")
trainer = [r for r in figs if r.get("step") == "trainer"]
need(trainer and "data_wait_share" in trainer[0] and trainer[0]["host_syncs_per_step"] <= 1,
     "the trainer's step: its data wait, at most one host sync a step")
py = [r for r in figs if r.get("benchmark") == "python_train_step"]
need(py and py[0]["images_per_s"] > 0 and "aten_ops_per_step" in py[0], "the PyTorch step beside ours")
need([r for r in figs if r.get("benchmark") == "features" and r["images_per_s"] > 0], "features")
PY
grep -q "^operator (host) .*self ms" "$work/out/profile.txt" 2>/dev/null ||
  echo "FAIL: the profile section's summary (profile.txt) lacks the operators' table"
grep -q "against the faster PyTorch step" "$work/out/summary.md" || echo "FAIL: no ratio against PyTorch"
grep -q "Multi-GPU NCCL between ranks: not measured" "$work/out/summary.md" || echo "FAIL: the summary does not say multi-GPU is not measured"
# A shorter lease (GPU_CONTACT_BUDGET): the sections past the budget are
# reported skipped, and the summary is still written. 25 s, not less: the
# inventory's box is cut to what is left, and on a loaded machine 11 s left
# it 5 s, which it overran.
GPU_CONTACT_BUDGET=25 bash "$src/scripts/gpu-first-contact.sh" --rehearse "$work/short" --build-dir "$build" \
  >"$work/short.out" 2>&1 || true
grep -q "^| inventory | ok" "$work/short/summary.md" 2>/dev/null ||
  { cat "$work/short.out"; echo "FAIL: under GPU_CONTACT_BUDGET=25 the summary lacks the inventory"; }
grep -q "^| pytorch | skipped: no time left |" "$work/short/summary.md" 2>/dev/null ||
  { cat "$work/short/summary.md"; echo "FAIL: under GPU_CONTACT_BUDGET=25 the last section (pytorch) was not reported skipped"; }
# A check that does not hold fails the command, and the summary says which.
echo "ok: gpu-first-contact rehearsed on the CPU"
