#!/usr/bin/env bash
# Exercises scdino on the GPUs of this node, as a user runs it, and reports
# what it measured: a data-parallel DINO training on every local GPU (one
# rank per GPU, NCCL all-reduce of the gradients, bf16 autocast), then the
# CLS features of its checkpoint on one GPU. Installed in the images as
# scdino-gpu-check. Any failure (no GPU, the image's cuDNN stand-in, a rank
# that fails, a missing result) fails the check with a message; nothing is
# skipped quietly.
#
#   scdino-gpu-check                                        # inside the image (its programs on PATH)
#   srun -N1 --gpus=8 --container-image=/shared/images/scdino-cuda.sqsh scdino-gpu-check
#   bash scripts/gpu-check.sh --image localhost/scdino:cuda  # podman with NVIDIA's CDI devices
#   bash scripts/gpu-check.sh --image scdino-cuda.sqsh      # enroot (NVIDIA hook mounts the driver)
#   bash scripts/gpu-check.sh --bin-dir build/services/trainer/..  # programs of a build tree
#
# GPU_CHECK_BATCH (per GPU, 64), GPU_CHECK_EPOCHS (3), GPU_CHECK_PRECISION
# (bf16), GPU_CHECK_THREADS (CPU threads per rank, 8), GPU_CHECK_OUT (where
# the run and its logs stay; a temporary directory by default).
set -euo pipefail

image="" bin_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --image) image=${2:?--image needs an image}; shift ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

if [ -n "$image" ]; then
  # Run this check inside the image with every GPU of the node.
  if [ -f "$image" ]; then
    command -v enroot >/dev/null || fail "$image is an Enroot image and enroot is not installed here"
    name=scdino-gpu-check-$$
    enroot create --name "$name" "$image" >/dev/null
    trap 'enroot remove -f "$name" >/dev/null 2>&1' EXIT
    NVIDIA_VISIBLE_DEVICES=all enroot start --env GPU_CHECK_BATCH --env GPU_CHECK_EPOCHS --env GPU_CHECK_PRECISION \
      --env GPU_CHECK_THREADS "$name" scdino-gpu-check
  else
    command -v podman >/dev/null || fail "--image $image: podman is not installed here"
    podman run --rm --device nvidia.com/gpu=all --security-opt=label=disable --network host \
      -e GPU_CHECK_BATCH -e GPU_CHECK_EPOCHS -e GPU_CHECK_PRECISION -e GPU_CHECK_THREADS "$image" scdino-gpu-check
  fi
  exit $?
fi

bin() { if [ -n "$bin_dir" ]; then find "$bin_dir" -type f -name "$1" -perm -u+x | head -1; else command -v "$1"; fi; }
trainer=$(bin scdino-trainer) || true
features=$(bin scdino-features) || true
[ -x "$trainer" ] && [ -x "$features" ] ||
  fail "scdino-trainer and scdino-features not found (${bin_dir:-on PATH}); run inside the GPU image or give --bin-dir"

version=$("$trainer" --version)
echo "$version"
grep -q "compiled in" <<<"$version" || fail "this scdino-trainer is built without CUDA"
! grep -q "stand-in" <<<"$version" ||
  fail "the image carries the cuDNN stand-in; rebuild it with scripts/build-image.sh --cuda --cudnn download (or archive=FILE)"
gpus=$(sed -n 's/^GPUs visible: \([0-9]*\).*/\1/p' <<<"$version")
[ "${gpus:-0}" -gt 0 ] || fail "no GPU visible (CUDA_VISIBLE_DEVICES, srun --gpus, the container's NVIDIA hook)"

batch=${GPU_CHECK_BATCH:-64}
epochs=${GPU_CHECK_EPOCHS:-3}
threads=${GPU_CHECK_THREADS:-8}
out=${GPU_CHECK_OUT:-$(mktemp -d)}
mkdir -p "$out"
# 5 global batches an epoch over all GPUs (synthetic 224 px, 5-channel cells).
per_class=$(( batch * gpus * 5 / 4 ))
cat >"$out/gpu.yaml" <<YAML
meta:
  name_of_run: gpu-check
  output_dir: $out
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
downstream_analyses:
  compute_cls_features: {batch_size_per_gpu: 256, resize_length: 224}
scdino:
  device: cuda
  precision: ${GPU_CHECK_PRECISION:-bf16}
  data_source: synthetic
  synthetic: {classes: 4, per_class: $per_class, channels: 5, size: 224}
YAML

echo "gpu-check: training vit_small/16 on $gpus GPU(s), $batch images per GPU a step, $epochs epochs"
port=$(( 29500 + $$ % 1000 ))
pids=()
for ((r = 0; r < gpus; r++)); do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$gpus LOCAL_RANK=$r LOCAL_WORLD_SIZE=$gpus \
    "$trainer" --config "$out/gpu.yaml" --threads "$threads" >"$out/rank$r.out" 2>&1 &
  pids+=($!)
done
for ((r = 0; r < gpus; r++)); do
  wait "${pids[$r]}" || { tail -20 "$out/rank$r.out" >&2; fail "rank $r of the training failed (log: $out/rank$r.out)"; }
done
grep -q "rank 0 of $gpus, nccl" "$out/rank0.out" || { cat "$out/rank0.out" >&2; fail "the ranks did not form an NCCL group"; }
python3 - "$out/gpu-check/log.jsonl" "$gpus" <<'PY' || fail "no training figures in $out/gpu-check/log.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = lines[-1]  # the first epoch includes warm-up
print(f"gpu-check: training: {last['images_per_s']:.1f} images/s on {sys.argv[2]} GPU(s) (epoch {last['epoch'] + 1}), "
      f"peak GPU memory {last.get('gpu_mem_peak_bytes', 0) / 2**30:.2f} GiB, "
      f"all-reduce wait {last.get('allreduce_wait_s', 0):.2f} s, loss {last['loss']:.4f}")
PY

echo "gpu-check: CLS features of the checkpoint on GPU 0"
start=$(date +%s%N)
"$features" --config "$out/gpu.yaml" --checkpoint "$out/gpu-check/checkpoint.safetensors" --threads "$threads" \
  >"$out/features.out" 2>&1 || { tail -20 "$out/features.out" >&2; fail "scdino-features failed (log: $out/features.out)"; }
ms=$(( ($(date +%s%N) - start) / 1000000 ))
images=$(( 4 * per_class ))
echo "gpu-check: features: $images images in $ms ms, $(( images * 1000 / (ms > 0 ? ms : 1) )) images/s (start-up included)"
echo "gpu-check: passed; run and logs in $out"
