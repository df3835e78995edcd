#!/usr/bin/env bash
# One prepared run of scdino's GPU benchmarks on a single lent GPU, about ten
# minutes in all (docs/performance.md, "On a GPU"): no podman, no enroot, no
# network there, a pip LibTorch (torch.utils.cmake_prefix_path) and the
# libraries scdino builds with carried as files (--deps: a prefix with
# include/ and lib/, docs/containers.md). It compiles once, only the
# benchmarks it runs; each section has its own time box, the most important
# first, and every figure goes into the summary as soon as it is measured,
# so a time-out still leaves the figures before it.
#
#   bash scripts/gpu-bench.sh [--out DIR] [--deps DIR] [--build-dir DIR]
#   bash scripts/gpu-bench.sh --rehearse --build-dir build   # every section on the CPU, tiny (CI)
#
# Sections, in order, with their time boxes (seconds):
#   versions   (20)  the GPU, driver, LibTorch, CUDA, NCCL, Python's torch
#   build     (360)  configure against the pip LibTorch, build the two benchmarks
#                    (skipped with --build-dir holding them)
#   step-B     (90)  vit_small/16, 5 channels, 2 x 224 + 8 x 96, bf16, batch B
#                    in 64, 128, 256: images/s, ms a step, the fraction of the
#                    dense bf16 peak (GPU_BENCH_PEAK_TFLOPS, 989), peak memory,
#                    the attention kernel SDPA took, operator calls and host
#                    synchronisations a step (scdino-bench-train-step)
#   pytorch   (120)  bench/python_train_step.py at the best batch, the same
#                    crops: bf16 autocast, SDPA, fused AdamW, eager
#   compile   (180)  the same under torch.compile, where that torch has it
#   data       (90)  the trainer's own step over 50 px TIFF cells, 50 steps:
#                    the data wait's share of the epoch
#   features   (60)  scdino-bench-features: 50 px cells resized to 224, bf16
#   summary          ours against the faster PyTorch step
# Multi-GPU NCCL (the all-reduce between ranks) cannot run on one GPU: it is
# not faked here; scripts/gpu-check.sh and scdino-preflight do it on a node.
# --rehearse runs every section on the CPU at a tiny size from a build tree
# (it compiles nothing): the test suite runs it (gpu.BenchRehearsedOnTheCpu).
# The summary: DIR/summary.jsonl (one JSON object a measurement, with its
# section) and DIR/summary.md (a table), DIR/gpu-bench.log (everything).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
rehearse=0 out="" deps="" build_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) rehearse=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --deps) deps=${2:?--deps needs a directory}; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
    -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scdino: gpu-bench.sh: unknown argument '$1' (--help says what it takes)" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-${GPU_BENCH_OUT:-$(mktemp -d /tmp/scdino-gpu-bench.XXXXXX)}}
mkdir -p "$out"
summary=$out/summary.jsonl log=$out/gpu-bench.log
: > "$summary"
: > "$log"
python=${GPU_BENCH_PYTHON:-python3}
[ "$rehearse" = 1 ] && python=/usr/bin/python3

say() { echo "gpu-bench: $*" | tee -a "$log" >&2; }
# record SECTION JSON: one measurement into the summary.
record() { "$python" -c 'import json,sys; r=json.loads(sys.argv[2]); r["section"]=sys.argv[1]; print(json.dumps(r))' "$1" "$2" >> "$summary"; }
# section NAME SECONDS COMMAND...: runs it in its time box; every JSON line it
# prints is a measurement of the section; its end (rc, seconds) is one too.
section() {
  local name=$1 box=$2
  shift 2
  local start rc
  start=$(date +%s.%N)
  say "[$name] (at most ${box} s) $*"
  timeout --kill-after=10 "$box" "$@" > "$out/$name.out" 2> "$out/$name.err"
  rc=$?
  cat "$out/$name.out" "$out/$name.err" >> "$log"
  while IFS= read -r line; do
    case $line in "{"*) record "$name" "$line" ;; esac
  done < "$out/$name.out"
  local secs
  secs=$("$python" -c "import sys; print(round($(date +%s.%N) - $start, 1))")
  local what=ok
  [ "$rc" = 0 ] || what="failed (exit $rc)"
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && what="timed out after $box s"
  record "$name" "{\"end\": \"$what\", \"rc\": $rc, \"seconds\": $secs}"
  say "[$name] $what in $secs s$( [ "$rc" = 0 ] || echo ": $(tail -3 "$out/$name.err" | tr '\n' ' ')")"
  return "$rc"
}

if [ "$rehearse" = 1 ]; then
  # The CPU stands in for the GPU, every size tiny; every section runs.
  device=cpu precision=fp32 batches="2 4" steps=1 warmup=1 data_steps=3 loaders=1
  model=(--arch vit_tiny --depth 2 --patch 8 --global 32 --local 16 --local-crops 2 --out-dim 256 --threads 2)
  py_model=(--arch vit_tiny --depth 2 --patch 8 --global-size 32 --local-size 16 --local-crops 2 --out-dim 256 --threads 2)
  features=(--arch vit_tiny --patch 8 --size 32 --image-size 16 --images 16 --batch 8 --loaders 1 --threads 2)
  build_dir=${build_dir:-$src/build}
else
  device=cuda precision=bf16 batches="64 128 256" steps=${GPU_BENCH_STEPS:-20} warmup=5 data_steps=50 loaders=8
  model=(--arch vit_small --patch 16 --global 224 --local 96 --local-crops 8 --out-dim 65536 --threads 8
         --peak-tflops "${GPU_BENCH_PEAK_TFLOPS:-989}")
  py_model=(--arch vit_small --patch 16 --global-size 224 --local-size 96 --local-crops 8 --out-dim 65536 --threads 8)
  features=(--arch vit_small --patch 16 --size 224 --image-size 50 --images 8192 --batch 256 --loaders 8 --threads 8)
fi
say "output in $out ($( [ "$rehearse" = 1 ] && echo "rehearsal on the CPU" || echo "one GPU"))"

# versions
section versions 20 bash -c '
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  '"$python"' -c "
import json, torch
v = {\"torch\": torch.__version__, \"cuda\": torch.version.cuda, \"cuda_available\": torch.cuda.is_available()}
if torch.cuda.is_available():
    v[\"gpu\"] = torch.cuda.get_device_name(0)
    v[\"nccl\"] = \".\".join(map(str, torch.cuda.nccl.version()))
print(json.dumps(v))"'

# build
bench_bin=""
for d in "$build_dir/bench" "$build_dir"; do
  [ -n "$build_dir" ] && [ -x "$d/scdino-bench-train-step" ] && [ -x "$d/scdino-bench-features" ] && bench_bin=$d && break
done
if [ -z "$bench_bin" ]; then
  if [ "$rehearse" = 1 ]; then
    say "no benchmarks in $build_dir (the rehearsal compiles nothing: build the test tree first)"
    exit 1
  fi
  build_dir=${build_dir:-$out/build}
  prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  cxx_flags="" prefix_path=$prefix
  if [ -n "$deps" ]; then
    # The wheel ships no Gloo headers; the carried libraries' headers, CMake
    # and pkg-config files are under DEPS.
    cxx_flags="-isystem $deps/include" prefix_path="$deps;$prefix"
    export LD_LIBRARY_PATH="$deps/lib:${LD_LIBRARY_PATH:-}" PKG_CONFIG_PATH="$deps/lib/pkgconfig:${PKG_CONFIG_PATH:-}"
  fi
  cudnn=$(ls "$site"/nvidia/cudnn/lib/libcudnn.so.* 2>/dev/null | head -1)
  cat > "$out/build.sh" <<EOF
set -e
cmake -G Ninja -S '$src' -B '$build_dir' -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH='$prefix_path' \\
  -DCMAKE_CXX_FLAGS='$cxx_flags' -DTORCH_CUDA_ARCH_LIST=9.0 -DSCDINO_NCCL_INCLUDE_DIR='$site/nvidia/nccl/include' \\
  -DSCDINO_CUDNN_LIBRARY='$cudnn' -DSCDINO_WITH_SERVICES=OFF -DSCDINO_BUILD_TESTS=OFF -DSCDINO_BUILD_BENCH=ON \\
  > '$out/configure.log'
cmake --build '$build_dir' --target scdino-bench-train-step scdino-bench-features
EOF
  section build 360 bash "$out/build.sh" || { say "the build failed: $out/build.err, $out/configure.log"; exit 1; }
  bench_bin=$build_dir/bench
fi
step_bench=$bench_bin/scdino-bench-train-step
features_bench=$bench_bin/scdino-bench-features
"$step_bench" --version >> "$log" 2>&1

# Our step at each batch; the fastest sets the PyTorch step's batch.
best=""
for b in $batches; do
  section "step-$b" 90 "$step_bench" "${model[@]}" --device "$device" --precision "$precision" --batch "$b" \
    --steps "$steps" --warmup "$warmup" --count-steps 1 || true
done
best=$("$python" - "$summary" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r.get("benchmark") == "train_step" and r.get("step") == "dino"]
print(max(steps, key=lambda r: r["images_per_s"])["batch"] if steps else "")
EOF
)
best=${best:-${batches%% *}}
say "best batch of ours: $best"

# The PyTorch step beside ours, the same crops and batch.
py_args=("${py_model[@]}" --device "$device" --precision "$precision" --style fast --batch "$best"
         --steps "$steps" --warmup "$warmup")
section pytorch 120 "$python" "$src/bench/python_train_step.py" "${py_args[@]}" --count-ops || true
if "$python" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null; then
  section compile 180 "$python" "$src/bench/python_train_step.py" "${py_args[@]}" --compile || true
else
  record compile '{"end": "skipped: this torch has no torch.compile"}'
  say "[compile] skipped: $("$python" -c 'import torch; print(torch.__version__)') has no torch.compile"
fi

# The trainer's own step over TIFF cells: the data wait.
data_model=("${model[@]}")
[ "$rehearse" = 1 ] || data_model=(--arch vit_small --patch 16 --global 224 --local 96 --local-crops 8 --out-dim 65536 --threads 8)
section data 90 "$step_bench" "${data_model[@]}" --device "$device" --trainer 1 --image-size 50 --batch "$best" \
  --steps "$data_steps" --warmup 2 --count-steps 1 --loaders "$loaders" || true

# Features.
section features 60 "$features_bench" "${features[@]}" --device "$device" --precision "$precision" || true

# The summary.
"$python" - "$summary" "$out/summary.md" <<'EOF' | tee -a "$log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = []
steps = [r for r in rows if r.get("benchmark") == "train_step" and r.get("step") == "dino"]
py = [r for r in rows if r.get("benchmark") == "python_train_step"]
out.append("| step | batch | images/s | ms a step | of the bf16 peak | peak memory GiB | attention | ops a step | host syncs a step |")
out.append("|---|---|---|---|---|---|---|---|---|")
for r in steps:
    mem = r.get("peak_memory_bytes")
    out.append("| scdino | %d | %.1f | %.1f | %s | %s | %s | %.0f | %.1f |" % (
        r["batch"], r["images_per_s"], 1000 * r["step_s"],
        "%.1f%%" % (100 * r["fraction_of_peak"]) if "fraction_of_peak" in r and r.get("device") == "cuda" else "-",
        "%.2f" % (mem / 2**30) if mem else "-", r.get("attention", "-"),
        r.get("aten_ops_per_step", 0), r.get("host_syncs_per_step", 0)))
for r in py:
    mem = r.get("peak_memory_bytes")
    out.append("| PyTorch %s%s | %d | %.1f | %.1f | - | %s | %s | %s | %s |" % (
        r["style"], " compiled" if r.get("compile") else "", r["batch"], r["images_per_s"], 1000 * r["step_s"],
        "%.2f" % (mem / 2**30) if mem else "-", r.get("attention", "-"),
        r.get("aten_ops_per_step", "-"), r.get("host_syncs_per_step", "-")))
if steps and py:
    best = max(steps, key=lambda r: r["images_per_s"])
    same = [r for r in steps if r["batch"] == py[0]["batch"]] or [best]
    faster = max(py, key=lambda r: r["images_per_s"])
    out.append("")
    out.append("ours at batch %d against the faster PyTorch step (%s%s): %.2fx" % (
        same[0]["batch"], faster["style"], " compiled" if faster.get("compile") else "",
        same[0]["images_per_s"] / faster["images_per_s"]))
for r in rows:
    if r.get("step") == "trainer":
        out.append("the trainer's step over %d px cells, %d steps: %.1f images/s, data wait %.1f%% of the epoch" % (
            r["image_size"], r["steps"], r["images_per_s"], 100 * r["data_wait_share"]))
    if r.get("benchmark") == "features":
        out.append("features: %.0f images/s (%s px cells at %s px, batch %s, %s)" % (
            r["images_per_s"], r["image_size"], r["size"], r["batch"], r["precision"]))
    if "end" in r and r["end"] != "ok":
        out.append("section %s: %s" % (r["section"], r["end"]))
out.append("Multi-GPU NCCL: not measured (one GPU).")
text = "\n".join(out) + "\n"
open(sys.argv[2], "w").write(text)
print(text)
EOF
say "summary: $out/summary.md, $summary"
