#!/usr/bin/env bash
# The first contact with a lent GPU: one command of at most nine minutes
# (timeout 540) that builds scdino there from the dependency pack, checks the
# GPU against the CPU, and only then times it. The lent machine has one GPU,
# a pip torch (PyTorch 2.x with CUDA), nvcc, CMake and Ninja, and no network;
# what it lacks comes in the carried folder build/gpu-carry (the pack from
# scripts/pack-gpu-deps.sh and the parity fixture), which --prepare makes.
#
#   bash scripts/gpu-first-contact.sh --prepare                 # here: make build/gpu-carry, print the device call
#   timeout 540 bash scripts/gpu-first-contact.sh OUT_DIR       # there (the device call: OUT_DIR is $OUT)
#   bash scripts/gpu-first-contact.sh --rehearse OUT_DIR --build-dir build   # here: every section on the CPU, tiny
#
# Sections, most important first, each in its time box (seconds), figures
# written as they come, so a time-out still leaves those before it:
#   inventory          20  nvidia-smi, driver, torch/CUDA/NCCL, nvcc, pkg-config, glibc, the pack,
#                          libstdc++, the std::filesystem functions LibTorch exports
#   build             180  configure against the pip LibTorch and the pack alone (SCDINO_REQUIRE_CUDA),
#                          build exactly what the sections run, into build-gpu/ (a rerun skips it),
#                          check that each program names libstdc++ before LibTorch
#   parity             45  the parity fixture's two steps on the GPU in fp32 within the CPU's
#                          tolerances, the AdamW path taken, a bf16 step's loss within 2% of fp32's
#   trainer-steps      30  four steps of the trainer's own step (loader, side-stream crops) against
#                          the same four on the CPU
#   nccl               15  a one-rank NCCL communicator: made, an all-reduce checked, aborted
#   step-64, step-256  30, 35  vit_small/16, 5 channels, 2x224 + 8x96, bf16: images/s, fraction of
#                          the bf16 peak, peak memory, ops and host syncs a step
#   data               40  the trainer over 50 px TIFF cells, 50 steps: the data wait (CUDA events),
#                          the allocator's reserved against peak memory
#   features           30  CLS features of 50 px cells at 224 px, bf16: images/s
#   profile            45  the profiler's trace of 3 steps at our best batch: the GPU's busy time,
#                          its kernels by kind and the longest (profile.txt; trace.json.gz)
#   pytorch            45  PyTorch's step (eager) at our best batch, the same crops; torch.compile
#                          after it only when GPU_CONTACT_COMPILE=1 and 90 s are left
# The boxes add up to less than 540 s (checked at start, and by the rehearsal
# in the test suite). A section that fails (an NCCL error, a test that does
# not hold) is reported with its own message and the next one runs.
# OUT_DIR receives at most 8 files: summary.md, summary.json (every figure),
# first-contact.log (every section's output), inventory.txt, profile.txt and
# trace.json.gz.
# Options: --pack DIR (build/gpu-carry/pack), --shared DIR (build/gpu-carry/shared,
# else ../shared), --build-dir DIR (build-gpu; --rehearse: an existing test
# tree, built by scripts/test.sh), --python PY (python3), --build-only (the
# inventory and the build, nothing run: the test suite's build from the pack
# alone, tests/deploy/gpu_pack_build_test.sh). GPU_CONTACT_BUDGET=SECONDS: a
# shorter command than 540 s (a lease with less left; later sections skipped;
# with none of the checks run, it ends 1).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
# GPU_CONTACT_BUDGET: a shorter command (a lease with less time left); the
# sections past it are reported skipped, most important first.
budget=${GPU_CONTACT_BUDGET:-540}
rehearse=0 prepare=0 build_only=0 out="" pack="" shared="" build_dir="" python=${GPU_CONTACT_PYTHON:-python3}
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) rehearse=1 ;;
    --prepare) prepare=1 ;;
    --build-only) build_only=1 ;;
    --pack) pack=${2:?--pack needs a directory}; shift ;;
    --shared) shared=${2:?--shared needs a directory}; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
    --python) python=${2:?--python needs a program}; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "scdino: gpu-first-contact.sh: unknown option '$1' (--help says what it takes)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "scdino: gpu-first-contact.sh: one output folder, got '$out' and '$1'" >&2; exit 2; }
       out=$1 ;;
  esac
  shift
done
carry=$src/build/gpu-carry

# ---- --prepare: here, the carried folder and the device call ---------------
if [ "$prepare" = 1 ]; then
  set -e
  bash "$src/scripts/pack-gpu-deps.sh" "$carry/pack"
  fixture=${shared:-$src/../shared}/reference/dino-parity
  [ -r "$fixture/config.json" ] || { echo "scdino: no parity fixture at $fixture (--shared DIR)" >&2; exit 1; }
  rm -rf "$carry/shared"
  mkdir -p "$carry/shared/reference"
  cp -a "$fixture" "$carry/shared/reference/"
  tree=$(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  sent=$(( $(du -sb "$carry" | cut -f1) + tree ))
  echo "scdino: build/gpu-carry is ready; with the working tree $(( sent / 1048576 )) MiB travel (at most 64)."
  echo "The device call (one command; leave time to rerun it):"
  echo "  run  command: timeout 540 bash scripts/gpu-first-contact.sh \"\$OUT\""
  echo "       carry:   [\"build/gpu-carry\"]   timeout_s: 580"
  exit 0
fi
[ -n "$out" ] || { echo "scdino: gpu-first-contact.sh: give the output folder (--help)" >&2; exit 2; }
# --build-only (the test suite, on two cores) compiles what a 16-core GPU
# machine compiles in its 240 s: no budget there but an hour.
[ "$build_only" = 0 ] || budget=3600
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/first-contact.log figures=$out/.figures.jsonl
: > "$log"
: > "$figures"
work=$(mktemp -d "${TMPDIR:-/tmp}/scdino-contact.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
[ "$rehearse" = 1 ] && python=/usr/bin/python3


say() { echo "first-contact: $*" | tee -a "$log" >&2; }
left() { echo $(( budget - 5 - ($(date +%s) - start) )); }
# figure SECTION JSON: one measurement or verdict into the summary.
figure() { "$python" -c 'import json,sys; r=json.loads(sys.argv[2]); r["section"]=sys.argv[1]; print(json.dumps(r))' "$1" "$2" >> "$figures"; }
box_of() { local s; for s in "${plan[@]}"; do [ "${s%%:*}" = "$1" ] && echo "${s#*:}" && return; done; echo 60; }
# section NAME COMMAND...: runs it in its box (never past the budget); every
# JSON line it prints is a figure; its end (ok, failed with the last lines,
# timed out, skipped) is one too.
section() {
  local name=$1 box rc t0 secs what
  shift
  box=$(box_of "$name")
  [ "$(left)" -lt "$box" ] && box=$(left)
  if [ "$box" -lt 5 ]; then
    figure "$name" '{"end": "skipped: no time left"}'
    say "[$name] skipped: no time left"
    return 1
  fi
  say "[$name] (at most $box s) $*"
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$box" "$@" > "$work/$name.out" 2> "$work/$name.err"
  rc=$?
  { echo "---- $name: stdout"; cat "$work/$name.out"; echo "---- $name: stderr"; cat "$work/$name.err"; } >> "$log"
  while IFS= read -r line; do
    case $line in "{"*) figure "$name" "$line" ;; esac
  done < "$work/$name.out"
  secs=$("$python" -c "print(round($(date +%s.%N) - $t0, 1))")
  what=ok
  [ "$rc" = 0 ] || what="failed (exit $rc)"
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && what="timed out after $box s"
  local detail=""
  [ "$rc" = 0 ] || detail=$(grep -hE 'Failure|FAILED|error|Error|what\(\)|NCCL' "$work/$name.out" "$work/$name.err" | tail -4)
  [ -n "$detail" ] || [ "$rc" = 0 ] || detail=$(tail -3 "$work/$name.err")
  figure "$name" "$("$python" -c 'import json,sys; print(json.dumps({"end": sys.argv[1], "rc": int(sys.argv[2]), "seconds": float(sys.argv[3]), "detail": sys.argv[4]}))' "$what" "$rc" "$secs" "$detail")"
  say "[$name] $what in $secs s${detail:+: $(echo "$detail" | tr '\n' ' ')}"
  return "$rc"
}

if [ "$rehearse" = 1 ]; then
  device=cpu test_device=cpu precision=fp32 batches=(2 4) steps=2 warmup=1 data_steps=4 loaders=1
  model=(--arch vit_tiny --depth 2 --patch 8 --global 32 --local 16 --local-crops 2 --out-dim 256 --threads 2)
  py_model=(--arch vit_tiny --depth 2 --patch 8 --global-size 32 --local-size 16 --local-crops 2 --out-dim 256 --threads 2)
  features=(--arch vit_tiny --patch 8 --size 32 --image-size 16 --images 16 --batch 8 --loaders 1 --threads 2)
  build_dir=${build_dir:-$src/build}
else
  device=cuda test_device=cuda precision=bf16 batches=(64 256) steps=${GPU_CONTACT_STEPS:-20} warmup=5 data_steps=50
  loaders=8
  model=(--arch vit_small --patch 16 --global 224 --local 96 --local-crops 8 --out-dim 65536 --threads 8
         --peak-tflops "${GPU_CONTACT_PEAK_TFLOPS:-989}")
  py_model=(--arch vit_small --patch 16 --global-size 224 --local-size 96 --local-crops 8 --out-dim 65536 --threads 8)
  features=(--arch vit_small --patch 16 --size 224 --image-size 50 --images 8192 --batch 256 --loaders 8 --threads 8)
  build_dir=${build_dir:-$src/build-gpu}
fi
# The plan: name and box of every section, in order (compile, after it, only
# where time is left).
plan=(inventory:20 "build:$([ "$build_only" = 1 ] && echo 3500 || echo 180)" parity:45 trainer-steps:30 nccl:15 "step-${batches[0]}:30" "step-${batches[1]}:35"
      data:40 features:30 profile:45 pytorch:45)
boxes=0
for s in "${plan[@]}"; do boxes=$(( boxes + ${s#*:} )); done
if [ "$build_only" = 0 ] && [ -z "${GPU_CONTACT_BUDGET:-}" ] && [ "$boxes" -ge "$budget" ]; then
  say "the sections' boxes add up to $boxes s, not under the $budget s the command has"
  exit 1
fi
say "output in $out ($([ "$rehearse" = 1 ] && echo "rehearsal on the CPU, tiny sizes" || echo "one GPU")); boxes $boxes s of $budget"
figure plan "{\"boxes_seconds\": $boxes, \"budget_seconds\": $budget, \"rehearsal\": $([ "$rehearse" = 1 ] && echo true || echo false)}"

pack=${pack:-$carry/pack}
if [ -z "$shared" ]; then
  shared=$carry/shared
  [ -d "$shared/reference/dino-parity" ] || shared=$src/../shared
fi

# ---- inventory -------------------------------------------------------------
section inventory bash -c '
  echo "== GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 || echo "nvidia-smi: none"
  echo "== torch"; '"$python"' -c "
import json, torch
v = {\"torch\": torch.__version__, \"cuda\": torch.version.cuda, \"cuda_available\": torch.cuda.is_available()}
if torch.cuda.is_available():
    v[\"gpu\"] = torch.cuda.get_device_name(0)
    v[\"nccl\"] = \".\".join(map(str, torch.cuda.nccl.version()))
print(json.dumps(v))" 2>&1
  echo "== nvcc"; (nvcc --version || ls /usr/local/cuda/bin/nvcc) 2>&1 | tail -2
  echo "== cmake, ninja, c++"; cmake --version | head -1; ninja --version; c++ --version | head -1
  echo "== pkg-config on the machine"; command -v pkg-config || echo "none (the pack brings its own)"
  echo "== glibc"; ldd --version | head -1
  echo "== cores, memory"; nproc; free -g | sed -n 2p
  echo "== the pack ('"$pack"')"; head -3 "'"$pack"'/MANIFEST.txt" 2>&1; grep -c " runtime$" "'"$pack"'/MANIFEST.txt" 2>/dev/null
  echo "== the parity fixture ('"$shared"')"; ls "'"$shared"'/reference/dino-parity" 2>&1 | tr "\n" " "; echo
  echo "== libstdc++ (c++ -print-file-name), LDFLAGS, CXXFLAGS"; c++ -print-file-name=libstdc++.so.6; c++ -print-file-name=libstdc++.so
  c++ -print-file-name=libstdc++.a; echo "LDFLAGS=${LDFLAGS:-} CXXFLAGS=${CXXFLAGS:-}"
  echo "== std::filesystem functions LibTorch exports (pytorch/pytorch#133437; scdino links libstdc++ first)"
  '"$python"' -c "import os, torch; print(os.path.dirname(torch.__file__) + \"/lib\")" 2>/dev/null |
    xargs -I{} sh -c "nm -D --defined-only {}/libtorch*.so 2>/dev/null | grep -c _ZNSt10filesystem" 2>&1 || true'
[ -f "$work/inventory.out" ] && cp "$work/inventory.out" "$out/inventory.txt"

# ---- build -----------------------------------------------------------------
targets=(scdino-bench-train-step scdino-bench-features scdino_model_tests scdino_training_tests)
bins=("$build_dir/bench/scdino-bench-train-step" "$build_dir/bench/scdino-bench-features"
      "$build_dir/tests/model/scdino_model_tests" "$build_dir/tests/training/scdino_training_tests")
if [ "$rehearse" = 1 ]; then
  # The test tree is built already; nothing is compiled here.
  for b in "${bins[@]}"; do
    [ -x "$b" ] || { say "[build] the test tree $build_dir lacks $b (scripts/test.sh builds it)"; exit 1; }
  done
  if bash "$src/tests/deploy/link_order_test.sh" "$src" "$build_dir" 4 > "$work/link.out" 2>&1; then
    figure build '{"end": "ok", "rc": 0, "seconds": 0, "detail": "rehearsal: the test tree holds every target"}'
  else
    figure build "$("$python" -c 'import json,sys; print(json.dumps({"end": "failed (exit 1)", "rc": 1, "seconds": 0, "detail": sys.argv[1]}))' "$(tail -3 "$work/link.out")")"
  fi
else
  # A pip torch (the lent machine) brings LibTorch's CMake package, NCCL's
  # headers and cuDNN in site-packages, and nvcc in /usr/local/cuda; a
  # distribution's LibTorch (the test suite's trixie container) is found by
  # CMake itself.
  args=(-G Ninja -S "$src" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSCDINO_DEPS_PACK="$pack"
        -DSCDINO_REQUIRE_CUDA=ON -DSCDINO_WITH_SERVICES=OFF -DSCDINO_BUILD_TESTS=ON -DSCDINO_BUILD_BENCH=ON
        -DSCDINO_CPU_GEMM=off -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}")
  if prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
    site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    args+=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")"
           -DSCDINO_NCCL_INCLUDE_DIR="$site/nvidia/nccl/include"
           -DSCDINO_CUDNN_LIBRARY="$(ls "$site"/nvidia/cudnn/lib/libcudnn.so.* 2>/dev/null | head -1)")
  fi
  {
    echo "set -e"
    printf 'if [ ! -f %q ]; then cmake' "$build_dir/build.ninja"; printf ' %q' "${args[@]}"; echo "; fi"
    # -k 0: a target that does not compile leaves the others built, and
    # their sections run.
    printf 'cmake --build %q --target' "$build_dir"; printf ' %q' "${targets[@]}"; echo ' -- -k 0'
    # libstdc++ before LibTorch in every program (pytorch/pytorch#133437);
    # where not, the link line says why.
    printf 'bash %q %q %q 4 || { ninja -C %q -t commands scdino-bench-features | tail -1; exit 3; }\n' \
      "$src/tests/deploy/link_order_test.sh" "$src" "$build_dir" "$build_dir"
  } > "$work/build.sh"
  section build bash "$work/build.sh"
  build_rc=$?
  [ "$build_rc" = 0 ] || say "the build failed: the summary and log say where"
  if [ "$build_only" = 1 ]; then
    [ "$build_rc" = 0 ] && for b in "${bins[@]}"; do [ -x "$b" ] || { say "the build left no $b"; build_rc=1; }; done
    rm -f "$figures"
    exit "$build_rc"
  fi
fi

# ---- correctness: the GPU against the CPU ----------------------------------
# gtest_tail FILE: the test verdicts of a gtest JSON report, one JSON line each.
verdicts() {
  "$python" - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(json.dumps({"test": "(no report)", "passed": False, "failure": str(e)}))
    sys.exit(0)
for suite in r.get("testsuites", []):
    for t in suite.get("testsuite", []):
        fails = [f.get("failure", "") for f in t.get("failures", [])]
        print(json.dumps({"test": suite["name"] + "." + t["name"], "passed": not fails and t.get("result") == "COMPLETED",
                          "failure": "\n".join(fails)[:600], **({"adamw_path": t["adamw_path"]} if "adamw_path" in t else {})}))
PY
}
gtest() {  # gtest NAME BINARY FILTER
  local name=$1 bin=$2 filter=$3
  section "$name" env SCDINO_TEST_DEVICE="$test_device" SCDINO_SHARED_DIR="$shared" OMP_NUM_THREADS=4 \
    "$bin" --gtest_filter="$filter" --gtest_output="json:$work/$name.json"
  local rc=$?
  # A section skipped for want of time ran no check: it has no verdicts.
  [ -f "$work/$name.out" ] || return $rc
  while IFS= read -r line; do figure "$name" "$line"; done < <(verdicts "$work/$name.json")
  return $rc
}
gtest parity "$build_dir/tests/model/scdino_model_tests" \
  'DinoParity.TwoTrainingStepsMatchReferenceOnTheDeviceUnderTest:DinoParity.Bf16StepLossWithinTwoPercentOfFloat32OnTheDeviceUnderTest'
gtest trainer-steps "$build_dir/tests/training/scdino_training_tests" 'DeviceCheck.FourTrainerStepsOnTheDeviceMatchTheCpu'
gtest nccl "$build_dir/tests/training/scdino_training_tests" 'DeviceCheck.AOneRankProcessGroupFormsSumsAndAborts'

# ---- throughput ------------------------------------------------------------
step_bench=$build_dir/bench/scdino-bench-train-step
features_bench=$build_dir/bench/scdino-bench-features
for b in "${batches[@]}"; do
  section "step-$b" "$step_bench" "${model[@]}" --device "$device" --precision "$precision" --batch "$b" \
    --steps "$steps" --warmup "$warmup" --count-steps 1
done
best=$("$python" - "$figures" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r.get("benchmark") == "train_step" and r.get("step") == "dino" and r["section"] != "profile"]
print(max(steps, key=lambda r: r["images_per_s"])["batch"] if steps else "")
PY
)
best=${best:-${batches[0]}}
say "best batch of ours: $best"
# ---- the data wait and the allocator, features -----------------------------
data_model=("${model[@]}")
[ "$rehearse" = 1 ] || data_model=(--arch vit_small --patch 16 --global 224 --local 96 --local-crops 8 --out-dim 65536 --threads 8)
section data "$step_bench" "${data_model[@]}" --device "$device" --trainer 1 --image-size 50 --batch "${batches[0]}" \
  --steps "$data_steps" --warmup 2 --count-steps 1 --loaders "$loaders"
section features "$features_bench" "${features[@]}" --device "$device" --precision "$precision"

# ---- where the step's time goes ------------------------------------------
# The profiler's trace of a few steps at our best batch: the GPU's busy time
# and its kernels by kind (bench/profile_summary.py), the trace itself
# compressed beside it where it fits what comes back.
profile_steps=3
section profile "$step_bench" "${model[@]}" --device "$device" --precision "$precision" --batch "$best" \
  --steps "$profile_steps" --warmup "$warmup" --profile "$work/trace.json"
if [ -s "$work/trace.json" ]; then
  "$python" "$src/bench/profile_summary.py" "$work/trace.json" --steps "$profile_steps" --top 30 > "$out/profile.txt" 2>&1
  gzip -c "$work/trace.json" > "$work/trace.json.gz"
  [ "$(stat -c %s "$work/trace.json.gz")" -le $(( 15 * 1024 * 1024 )) ] && cp "$work/trace.json.gz" "$out/"
fi

# ---- PyTorch's step ----------------------------------------------------------
py_args=("${py_model[@]}" --device "$device" --precision "$precision" --style fast --batch "$best" --steps "$steps"
         --warmup "$warmup")
section pytorch "$python" "$src/bench/python_train_step.py" "${py_args[@]}" --count-ops
# torch.compile only when asked (GPU_CONTACT_COMPILE=1) and with the time
# left: PyTorch 2.11's Inductor failed on this step after 139 s on
# 2026-12-04 (docs/performance.md).
if [ "${GPU_CONTACT_COMPILE:-0}" = 1 ] &&
   "$python" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null &&
   [ "$(left)" -ge 90 ]; then
  plan+=("compile:$(left)")
  section compile "$python" "$src/bench/python_train_step.py" "${py_args[@]}" --compile
else
  figure compile '{"end": "skipped: GPU_CONTACT_COMPILE=1 asks for it, with 90 s left"}'
fi

# ---- the summary -----------------------------------------------------------
"$python" - "$figures" "$out/summary.md" "$out/summary.json" "$(( $(date +%s) - start ))" <<'PY' | tee -a "$log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ends = {r["section"]: r for r in rows if "end" in r}
out = ["# scdino: first contact with a GPU", ""]
plan = next((r for r in rows if r["section"] == "plan"), {})
out.append("%s; %s s of the %s s budget; boxes %s s." % (
    "rehearsal on the CPU" if plan.get("rehearsal") else "one GPU", sys.argv[4], plan.get("budget_seconds"),
    plan.get("boxes_seconds")))
out += ["", "| section | end | seconds |", "|---|---|---|"]
for name, r in ends.items():
    out.append("| %s | %s | %s |" % (name, r["end"] + (": " + r["detail"].replace("\n", " ")[:160] if r.get("detail") else ""),
                                     r.get("seconds", "-")))
checks = [r for r in rows if "test" in r]
out += ["", "## The GPU against the CPU", "", "| check | verdict |", "|---|---|"]
for r in checks:
    out.append("| %s | %s |" % (r["test"], "passed" + (" (AdamW path %s)" % r["adamw_path"] if r.get("adamw_path") else "")
                                if r["passed"] else "FAILED: " + r["failure"].replace("\n", " ")[:300]))
steps = [r for r in rows if r.get("benchmark") == "train_step" and r.get("step") == "dino" and r["section"] != "profile"]
py = [r for r in rows if r.get("benchmark") == "python_train_step"]
out += ["", "## Throughput", "",
        "| step | batch | images/s | ms a step | of the bf16 peak | peak memory GiB | attention | ops a step | host syncs a step |",
        "|---|---|---|---|---|---|---|---|---|"]
gib = lambda b: "%.2f" % (b / 2**30) if b else "-"
for r in steps:
    out.append("| scdino | %d | %.1f | %.1f | %s | %s | %s | %.0f | %.1f |" % (
        r["batch"], r["images_per_s"], 1000 * r["step_s"],
        "%.1f%%" % (100 * r["fraction_of_peak"]) if r.get("device") == "cuda" and "fraction_of_peak" in r else "-",
        gib(r.get("peak_memory_bytes")), r.get("attention", "-"), r.get("aten_ops_per_step", 0),
        r.get("host_syncs_per_step", 0)))
for r in py:
    out.append("| PyTorch %s%s | %d | %.1f | %.1f | - | %s | %s | %s | %s |" % (
        r["style"], " compiled" if r.get("compile") else "", r["batch"], r["images_per_s"], 1000 * r["step_s"],
        gib(r.get("peak_memory_bytes")), r.get("attention", "-"), r.get("aten_ops_per_step", "-"),
        r.get("host_syncs_per_step", "-")))
if steps and py:
    same = [r for r in steps if r["batch"] == py[0]["batch"]] or steps
    faster = max(py, key=lambda r: r["images_per_s"])
    out += ["", "ours at batch %d against the faster PyTorch step (%s%s): %.2fx" % (
        same[0]["batch"], faster["style"], " compiled" if faster.get("compile") else "",
        same[0]["images_per_s"] / faster["images_per_s"])]
for r in rows:
    if r.get("step") == "trainer":
        out.append("the trainer over %d px cells, batch %d, %d steps: %.1f images/s, data wait %.1f%% of the steps%s" % (
            r["image_size"], r["batch"], r["steps"], r["images_per_s"], 100 * r["data_wait_share"],
            "; allocator reserved %s GiB against a peak of %s GiB" % (gib(r["reserved_memory_bytes"]),
                                                                     gib(r["peak_memory_bytes"]))
            if r.get("reserved_memory_bytes") else ""))
    if r.get("benchmark") == "features":
        out.append("features: %.0f images/s (%s px cells at %s px, batch %s, %s)" % (
            r["images_per_s"], r["image_size"], r["size"], r["batch"], r["precision"]))
out.append("Multi-GPU NCCL between ranks: not measured (one GPU).")
text = "\n".join(out) + "\n"
open(sys.argv[2], "w").write(text)
json.dump({"sections": ends, "checks": checks, "figures": [r for r in rows if "end" not in r and "test" not in r]},
          open(sys.argv[3], "w"), indent=1)
print(text)
PY
rm -f "$figures"
read -r ran failed < <("$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["checks"]; print(len(c), sum(1 for x in c if not x["passed"]))' "$out/summary.json" 2>/dev/null || echo "0 1")
say "summary: $out/summary.md ($failed of $ran check(s) failed)"
# A command whose budget was spent before any check ran proved nothing: it
# fails, as a check that does not hold does.
[ "$ran" -gt 0 ] || say "no check ran: the budget ($budget s) was spent before them"
[ "$ran" -gt 0 ] && [ "$failed" = 0 ]
