#!/usr/bin/env bash
# Exercises scdino on the GPUs of this node, as a user runs it, and reports
# what it measured: a data-parallel DINO training on every local GPU (one
# rank per GPU, NCCL all-reduce of the gradients, bf16 autocast) on a folder
# of 5-channel TIFF cells that scdino-synth writes, then the CLS features of
# its checkpoint on one GPU. Installed in the images as scdino-gpu-check.
# Any failure (no GPU, a rank that fails, a missing result) fails the check
# with a message; nothing is skipped quietly. The image's cuDNN stand-in
# (scripts/build-image.sh --cuda's default) is no failure: the services
# switch cuDNN off and the model calls none.
# --rehearse runs the same steps on the CPU at a small size (one rank, Gloo):
# what CI runs so that this script works the day it meets a GPU.
#
#   scdino-gpu-check                                        # inside the image (its programs on PATH)
#   srun -N1 --gpus=8 --container-image=/shared/images/scdino-cuda.sqsh scdino-gpu-check
#   bash scripts/gpu-check.sh --image localhost/scdino:cuda  # podman with NVIDIA's CDI devices
#   bash scripts/gpu-check.sh --image scdino-cuda.sqsh      # enroot (NVIDIA hook mounts the driver)
#   bash scripts/gpu-check.sh --bin-dir build/services/trainer/..  # programs of a build tree
#   bash scripts/gpu-check.sh --bin-dir build/services --rehearse  # the same steps on the CPU
#
# GPU_CHECK_BATCH (per GPU, 64; rehearsed 8), GPU_CHECK_EPOCHS (3; 2),
# GPU_CHECK_PRECISION (bf16), GPU_CHECK_THREADS (CPU threads per rank, 8; 2),
# GPU_CHECK_OUT (where the run and its logs stay; a temporary directory by
# default).
set -euo pipefail

image="" bin_dir="" rehearse=0
while [ $# -gt 0 ]; do
  case $1 in
    --image) image=${2:?--image needs an image}; shift ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift ;;
    --rehearse) rehearse=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
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
synth=$(bin scdino-synth) || true
config_tool=$(bin scdino-config) || true
for p in "$trainer" "$features" "$synth" "$config_tool"; do
  [ -x "$p" ] || fail "scdino-trainer, scdino-features, scdino-synth and scdino-config not all found" \
    "(${bin_dir:-on PATH}); run inside the GPU image or give --bin-dir"
done

version=$("$trainer" --version)
echo "$version"
if [ "$rehearse" = 1 ]; then
  # The CPU stands in for one GPU; every step after this block is the same.
  gpus=1 device=cpu backend=gloo arch=vit_tiny patch=8 size=32 local=16 locals=2
  batch=${GPU_CHECK_BATCH:-8} epochs=${GPU_CHECK_EPOCHS:-2} threads=${GPU_CHECK_THREADS:-2}
else
  grep -q "compiled in" <<<"$version" || fail "this scdino-trainer is built without CUDA"
  gpus=$(sed -n 's/^GPUs visible: \([0-9]*\).*/\1/p' <<<"$version")
  [ "${gpus:-0}" -gt 0 ] || fail "no GPU visible (CUDA_VISIBLE_DEVICES, srun --gpus, the container's NVIDIA hook)"
  device=cuda backend=nccl arch=vit_small patch=16 size=224 local=96 locals=8
  batch=${GPU_CHECK_BATCH:-64} epochs=${GPU_CHECK_EPOCHS:-3} threads=${GPU_CHECK_THREADS:-8}
fi
out=${GPU_CHECK_OUT:-$(mktemp -d)}
mkdir -p "$out"
# 5 global batches an epoch over all ranks, of 5-channel cells in 4 class
# folders, written as TIFF files as a microscope's would be: the training,
# its learning check and the features read the same files.
per_class=$(( batch * gpus * 5 / 4 ))
rm -rf "$out/cells"
"$synth" --out "$out/cells" --classes 4 --per-class "$per_class" --channels 5 --size "$size" --seed 0 >/dev/null 2>"$out/synth.out" ||
  fail "scdino-synth could not write the check's cells under $out/cells"
cat >"$out/gpu.yaml" <<YAML
meta:
  name_of_run: gpu-check
  output_dir: $out
  dataset_dir: $out/cells
  seed: 0
  selected_channel_combination_per_run: ["01234"]
train_scDINO:
  epochs: $epochs
  saveckp_freq: 100
  batch_size_per_gpu: $batch
  hyperparameters:
    arch: $arch
    patch_size: $patch
    warmup_epochs: 1
    use_fp16: true
    global_crops_size: $size
    local_crops_size: $local
    local_crops_number: $locals
downstream_analyses:
  compute_cls_features: {batch_size_per_gpu: 256, resize_length: $size}
scdino:
  device: $device
  precision: ${GPU_CHECK_PRECISION:-bf16}
  cache_images: true
YAML
"$config_tool" check "$out/gpu.yaml" >"$out/config-check.out" 2>&1 ||
  { cat "$out/config-check.out" >&2; fail "scdino-config rejects the check's own config $out/gpu.yaml"; }

echo "gpu-check: training $arch/$patch on $gpus ${device^^} rank(s), $batch images per rank a step, $epochs epochs"
port=$(( 29500 + $$ % 1000 ))
pids=()
for ((r = 0; r < gpus; r++)); do
  # Its own ranks: inside a Slurm step, Slurm's variables would win.
  env -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$gpus LOCAL_RANK=$r LOCAL_WORLD_SIZE=$gpus \
    "$trainer" --config "$out/gpu.yaml" --threads "$threads" >"$out/rank$r.out" 2>&1 &
  pids+=($!)
done
for ((r = 0; r < gpus; r++)); do
  wait "${pids[$r]}" || { tail -20 "$out/rank$r.out" >&2; fail "rank $r of the training failed (log: $out/rank$r.out)"; }
done
grep -q "rank 0 of $gpus, $backend" "$out/rank0.out" ||
  { cat "$out/rank0.out" >&2; fail "the ranks did not form a $backend group"; }
python3 - "$out/gpu-check/log.jsonl" "$gpus" "$device" <<'PY' || fail "no training figures in $out/gpu-check/log.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = lines[-1]  # the first epoch includes warm-up
knn = last.get("knn_top1")
print(f"gpu-check: training: {last['images_per_s']:.1f} images/s on {sys.argv[2]} {sys.argv[3].upper()} rank(s) "
      f"(epoch {last['epoch'] + 1}), peak GPU memory {last.get('gpu_mem_peak_bytes', 0) / 2**30:.2f} GiB, "
      f"all-reduce wait {last.get('allreduce_wait_s', 0):.2f} s, loss {last['loss']:.4f}"
      + (f", teacher 20-NN {knn:.3f}" if knn is not None else ""))
PY

echo "gpu-check: CLS features of the checkpoint on ${device^^} 0"
start=$(date +%s%N)
"$features" --config "$out/gpu.yaml" --checkpoint "$out/gpu-check/checkpoint.safetensors" --threads "$threads" \
  >"$out/features.out" 2>&1 || { tail -20 "$out/features.out" >&2; fail "scdino-features failed (log: $out/features.out)"; }
ms=$(( ($(date +%s%N) - start) / 1000000 ))
images=$(( 4 * per_class ))
written=$(find "$out/gpu-check/features" -name '*.npy' 2>/dev/null | head -1)
[ -n "$written" ] || { tail -20 "$out/features.out" >&2; fail "scdino-features wrote no features under $out/gpu-check/features"; }
echo "gpu-check: features: $images images in $ms ms, $(( images * 1000 / (ms > 0 ? ms : 1) )) images/s (start-up included)"
echo "gpu-check: passed; run and logs in $out"
