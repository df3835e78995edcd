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
# A shorter lease (GPU_CONTACT_BUDGET): the command ends within it, and what
# did not fit is reported skipped. How many sections fit 25 s depends on the
# machine's speed and load (15 s here unloaded, over 25 s under the test
# run's), so that run holds the bound; a budget spent before the first
# section holds the skipping itself.
t0=$(date +%s)
GPU_CONTACT_BUDGET=25 bash "$src/scripts/gpu-first-contact.sh" --rehearse "$work/short" --build-dir "$build" \
  >"$work/short.out" 2>&1 || true
wall=$(( $(date +%s) - t0 ))
grep -q "^| inventory | ok" "$work/short/summary.md" 2>/dev/null ||
  { cat "$work/short.out"; echo "FAIL: under GPU_CONTACT_BUDGET=25 the summary lacks the inventory"; }
/usr/bin/python3 - "$work/short/summary.json" "$work/short/summary.md" "$wall" <<'PY' ||
import json, re, sys
d = json.load(open(sys.argv[1]))
spent = int(re.search(r"; (\d+) s of the 25 s budget", open(sys.argv[2]).read()).group(1))
bad = {k: v["end"] for k, v in d["sections"].items()
       if k != "compile" and not re.match(r"ok$|skipped: no time left$|timed out after \d+ s$", v["end"])}
# The sections stop at the budget. Past it, only bookkeeping: a Python start
# for each skipped section's line and for the summary, slow under the test
# run's load. A section run to its box (45 s for pytorch) would overrun far.
sys.exit("sections that neither ran, were skipped nor timed out: %s" % bad if bad else
         "the sections took %d s of a 25 s budget" % spent if spent > 35 else
         "the command took %s s in all under a 25 s budget" % sys.argv[3] if int(sys.argv[3]) > 50 else 0)
PY
  { cat "$work/short/summary.md"; echo "FAIL: under GPU_CONTACT_BUDGET=25 the command overran its budget (above)"; }
if GPU_CONTACT_BUDGET=5 bash "$src/scripts/gpu-first-contact.sh" --rehearse "$work/spent" --build-dir "$build" \
  >"$work/spent.out" 2>&1; then
  echo "FAIL: with its budget spent before any check, gpu-first-contact ended 0"
fi
grep -q "no check ran: the budget (5 s) was spent before them" "$work/spent.out" ||
  { cat "$work/spent.out"; echo "FAIL: with its budget spent, gpu-first-contact did not say no check ran"; }
for s in inventory parity trainer-steps nccl step-2 step-4 data features profile pytorch; do
  grep -q "^| $s | skipped: no time left |" "$work/spent/summary.md" 2>/dev/null ||
    { cat "$work/spent/summary.md" 2>/dev/null; echo "FAIL: with its budget spent, the section $s was not reported skipped"; }
done
# A check that does not hold fails the command, and the summary says which.
echo "ok: gpu-first-contact rehearsed on the CPU"
