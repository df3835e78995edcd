#!/usr/bin/env python3
"""Converts a PyTorch DINO or scDINO checkpoint (.pth) into scdino weights.

DINO's and scDINO's main_dino.py save {"student": ..., "teacher": ...,
"optimizer": ..., "epoch": ...}; the student's names carry DistributedDataParallel's
"module." prefix, both carry "backbone." and "head.". This script takes the
backbone of one of them (the teacher by default, as scDINO's feature step),
infers the ViT shape from the tensors, and writes a safetensors file with the
backbone under "<key>.backbone.*" and the shape in its "model" metadata, which
scdino-features and scdino-eval read like an scdino checkpoint:

    scripts/convert-dino-checkpoint.py scDINO_ViT_checkpoint.pth weights.safetensors
    scdino-features --config run.yaml --checkpoint weights.safetensors

A bare backbone state dict (DINO's released dino_vits16 weights) works too.
Needs PyTorch (python3-torch on Debian). See docs/features.md.
"""
import argparse
import json
import os
import re
import struct
import sys

import torch

HEADS_FOR_WIDTH = {192: 3, 384: 6, 768: 12}
DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}


def fail(message):
    print(f"convert-dino-checkpoint: {message}", file=sys.stderr)
    sys.exit(2)


def backbone_of(checkpoint, key, origin):
    if isinstance(checkpoint, dict) and key in checkpoint:
        state = checkpoint[key]
    elif isinstance(checkpoint, dict) and all(torch.is_tensor(v) for v in checkpoint.values()):
        state = checkpoint  # a bare state dict
    else:
        held = ", ".join(sorted(str(k) for k in checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        fail(f"{origin}: no '{key}' state dict (the file holds: {held})")
    out = {}
    for name, tensor in state.items():
        name = re.sub(r"^module\.", "", name)
        if name.startswith("head."):
            continue
        name = re.sub(r"^backbone\.", "", name)
        out[name] = tensor.detach().to("cpu").contiguous()
    if "cls_token" not in out or "patch_embed.proj.weight" not in out:
        fail(f"{origin}: '{key}' has no ViT backbone (cls_token, patch_embed.proj.weight missing)")
    return out


def shape_of(weights, num_heads, origin):
    proj = weights["patch_embed.proj.weight"]  # [embed_dim, in_chans, p, p]
    embed_dim, in_chans, patch = proj.shape[0], proj.shape[1], proj.shape[2]
    depth = len({int(m.group(1)) for n in weights for m in [re.match(r"blocks\.(\d+)\.", n)] if m})
    tokens = weights["pos_embed"].shape[1] - 1
    grid = int(round(tokens ** 0.5))
    if grid * grid != tokens:
        fail(f"{origin}: pos_embed has {tokens} patch positions, not a square grid")
    heads = num_heads or HEADS_FOR_WIDTH.get(embed_dim)
    if heads is None:
        fail(f"{origin}: embed_dim {embed_dim} is not vit_tiny/small/base (192/384/768); pass --num-heads")
    hidden = weights["blocks.0.mlp.fc1.weight"].shape[0]
    return {
        "in_chans": int(in_chans), "patch_size": int(patch), "img_size": int(grid * patch),
        "embed_dim": int(embed_dim), "depth": depth, "num_heads": int(heads),
        "mlp_ratio": hidden / embed_dim, "qkv_bias": "blocks.0.attn.qkv.bias" in weights,
        "layer_norm_eps": 1e-6,
    }


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in DTYPES:
            t = t.float()
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a DINO/scDINO .pth checkpoint, or a backbone state dict")
    p.add_argument("output", help="the scdino weights file to write (.safetensors)")
    p.add_argument("--key", default="teacher", choices=["teacher", "student"],
                   help="which network's backbone (default: teacher, as scDINO)")
    p.add_argument("--num-heads", type=int, default=0, help="attention heads, when embed_dim is not 192/384/768")
    args = p.parse_args()
    try:
        checkpoint = torch.load(args.checkpoint, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - every reason to not load is reported the same way
        fail(f"{args.checkpoint}: cannot load: {e}")
    weights = backbone_of(checkpoint, args.key, args.checkpoint)
    model = shape_of(weights, args.num_heads, args.checkpoint)
    metadata = {"format": "scdino-weights-1", "model": json.dumps(model), "source": args.checkpoint,
                "checkpoint_key": args.key}
    if isinstance(checkpoint, dict) and "epoch" in checkpoint:
        metadata["epoch"] = str(int(checkpoint["epoch"]))
    write_safetensors(args.output, {f"{args.key}.backbone.{n}": t for n, t in weights.items()}, metadata)
    print(f"convert-dino-checkpoint: {len(weights)} tensors of the {args.key} backbone "
          f"({model['embed_dim']}-wide, {model['depth']} blocks, {model['in_chans']} channels, patch "
          f"{model['patch_size']}) -> {args.output}")


if __name__ == "__main__":
    main()
