#!/usr/bin/env bash
# GPU check of the trainer core (model, data, training; no services).
#
# With a CUDA pip torch and a GPU: builds against that LibTorch
# (CMAKE_PREFIX_PATH from torch.utils.cmake_prefix_path, nccl.h from the
# nvidia-nccl wheel), then trains a few iterations of vit_small/16 on
# generated 224 px cells on GPU 0 through an NCCL process group of world size
# 1, in bf16 autocast, and prints images/s and peak GPU memory.
# Without them: configures and compiles the same targets against Debian's CPU
# LibTorch (the CUDA/NCCL code is left out) and says so.
#
#   bash scripts/gpu-check.sh                 # build dir build-gpu-check
#   PYTHON=/opt/venv/bin/python bash scripts/gpu-check.sh
#   GPU_CHECK_BATCH=64 GPU_CHECK_EPOCHS=3 bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build-gpu-check}
python=${PYTHON:-python3}
batch=${GPU_CHECK_BATCH:-64}
epochs=${GPU_CHECK_EPOCHS:-3}

torch_info() {
  "$python" - <<'PY' 2>/dev/null
import os, torch
print(torch.utils.cmake_prefix_path)
print("1" if torch.cuda.is_available() else "0")
print(torch.__version__)
inc = ""
try:
    import nvidia.nccl
    inc = os.path.join(list(nvidia.nccl.__path__)[0], "include")
except Exception:
    pass
print(inc)
print("1" if torch.compiled_with_cxx11_abi() else "0")
PY
}

mode=cpu
if info=$(torch_info) && [ "$(sed -n 2p <<<"$info")" = 1 ]; then
  mode=gpu
  prefix=$(sed -n 1p <<<"$info")
  nccl_inc=$(sed -n 4p <<<"$info")
  echo "gpu-check: torch $(sed -n 3p <<<"$info") with CUDA at $prefix"
  # Debian's yaml-cpp, libtiff and OpenCV pass std::string across their
  # interfaces with the C++11 ABI; a LibTorch built with the old one links
  # against them only to fail at run time, or not at all.
  if [ "$(sed -n 5p <<<"$info")" != 1 ]; then
    echo "gpu-check: this torch ($(sed -n 3p <<<"$info")) was built with the pre-C++11 ABI" \
         "(_GLIBCXX_USE_CXX11_ABI=0), while this system's C++ libraries use the C++11 ABI;" \
         "use a torch built with it (pip torch >= 2.7, or an NVIDIA NGC PyTorch container)" >&2
    exit 1
  fi
else
  echo "gpu-check: no CUDA torch or no GPU here ($python); compile-only check against Debian's LibTorch"
fi

args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DSCDINO_WITH_SERVICES=OFF -DSCDINO_BUILD_TESTS=OFF
      -DSCDINO_BUILD_BENCH=OFF)
if [ "$mode" = gpu ]; then
  args+=(-DCMAKE_PREFIX_PATH="$prefix")
  [ -n "$nccl_inc" ] && args+=(-DSCDINO_NCCL_INCLUDE_DIR="$nccl_inc")
  # Caffe2's CMake package looks for the CUDA toolkit; use the usual places.
  for cuda in "${CUDA_HOME:-}" /usr/local/cuda; do
    if [ -n "$cuda" ] && [ -x "$cuda/bin/nvcc" ]; then
      args+=(-DCUDAToolkit_ROOT="$cuda" -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc")
      break
    fi
  done
else
  bash scripts/install-deps.sh
fi
cmake -S . -B "$build_dir" "${args[@]}" | grep -E "scdino:|Error|error" || true
grep -q "scdino" "$build_dir/CMakeCache.txt"
cmake --build "$build_dir" --parallel "${SCDINO_BUILD_JOBS:-$(nproc)}" --target scdino-trainer
echo "gpu-check: built $build_dir/services/trainer/scdino-trainer"
if [ "$mode" = cpu ]; then
  echo "gpu-check: compile-only check passed (no GPU run)"
  exit 0
fi
grep -q "NCCL ON" <(cmake -S . -B "$build_dir" 2>&1) || {
  echo "gpu-check: this LibTorch has CUDA but nccl.h was not found; set SCDINO_NCCL_INCLUDE_DIR" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/gpu.yaml" <<YAML
meta:
  name_of_run: gpu-check
  output_dir: $work
  seed: 0
  selected_channel_combination_per_run: ["01234"]
train_scDINO:
  epochs: $epochs
  saveckp_freq: 100
  batch_size_per_gpu: $batch
  hyperparameters:
    arch: vit_small
    patch_size: 16
    use_fp16: true
    global_crops_size: 224
    local_crops_size: 96
    local_crops_number: 8
scdino:
  device: cuda
  precision: ${GPU_CHECK_PRECISION:-bf16}
  data_source: synthetic
  synthetic: {classes: 4, per_class: $((batch * 2)), channels: 5, size: 224}
YAML
MASTER_ADDR=127.0.0.1 MASTER_PORT=${GPU_CHECK_PORT:-29531} RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
  "$build_dir/services/trainer/scdino-trainer" --config "$work/gpu.yaml" --threads 8 | tee "$work/log.txt"
"$python" - "$work/log.txt" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
last = lines[-1]  # the first epoch includes warm-up
print(f"gpu-check: vit_small/16, 2x224 + 8x96 crops, ", end="")
print(f"images/s {last['images_per_s']:.1f} (epoch {last['epoch']}), "
      f"peak GPU memory {last.get('gpu_mem_peak_bytes', 0) / 2**30:.2f} GiB, "
      f"reserved {last.get('gpu_mem_reserved_bytes', 0) / 2**30:.2f} GiB, loss {last['loss']:.4f}")
PY
