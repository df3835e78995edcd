#!/usr/bin/python3
"""Reference DINO training steps for tests/model/parity_test.cc.

Re-implements, operation by operation, what facebookresearch/dino's
main_dino.py, utils.py and vision_transformer.py do in two training
iterations (ViT + DINOHead in a multi-crop wrapper, DINOLoss with centering,
per-parameter gradient clipping, last-layer freeze, AdamW with two parameter
groups, EMA teacher), and writes a fixture directory in the format of
../shared/reference/dino-parity (config.json, weights, step0, step1,
schedules safetensors).

  make_parity_fixture.py --out DIR [--dtype float32|float64]
                         [--config-preset shared|other] [--seed N]
  make_parity_fixture.py --check-against ../shared/reference/dino-parity

--check-against replays a fixture's own weights and crops in float32 and in
float64 and prints how far each group of tensors is from the stored one.
Weights and crops are drawn in float64 from --seed and cast to --dtype, so
a float32 and a float64 fixture of the same seed start from the same values
(up to the cast) and their difference is rounding only.
"""
import argparse
import json
import math
import os
import struct
from itertools import groupby

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # The shape of ../shared/reference/dino-parity.
    "shared": dict(in_chans=5, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=4.0, global_size=32,
                   local_size=16, local_crops_number=3, batch_size=3, head_hidden_dim=128, head_bottleneck_dim=32,
                   head_nlayers=3, out_dim=256, norm_last_layer=True, freeze_last_layer=1, clip_grad=3.0,
                   student_temp=0.1, warmup_teacher_temp=0.04, teacher_temp=0.04, warmup_teacher_temp_epochs=0,
                   center_momentum=0.9, lr=0.08, min_lr=1e-6, warmup_epochs=1, weight_decay=0.04,
                   weight_decay_end=0.4, momentum_teacher=0.996, epochs=3, niter_per_epoch=1),
    # Every option the shared one leaves untested: 3 channels, patch 4, depth
    # 3, a trained weight_g, no clipping, a teacher-temperature warm-up (0.04
    # in epoch 0, 0.07 in epoch 1). No lr warm-up, so that step 0 (Adam's
    # first step) moves the weights too; the shared fixture's step 0 has lr 0.
    "other": dict(in_chans=3, patch_size=4, embed_dim=48, depth=3, num_heads=3, mlp_ratio=4.0, global_size=16,
                  local_size=8, local_crops_number=2, batch_size=2, head_hidden_dim=64, head_bottleneck_dim=24,
                  head_nlayers=3, out_dim=128, norm_last_layer=False, freeze_last_layer=1, clip_grad=0.0,
                  student_temp=0.1, warmup_teacher_temp=0.04, teacher_temp=0.07, warmup_teacher_temp_epochs=2,
                  center_momentum=0.9, lr=0.08, min_lr=1e-6, warmup_epochs=0, weight_decay=0.04,
                  weight_decay_end=0.4, momentum_teacher=0.996, epochs=3, niter_per_epoch=1),
}
COMMON = dict(world_size=1, seed=0, mlp_qkv_bias=True, layer_norm_eps=1e-6, drop_path_rate=0.0)
ST_DTYPES = {"F32": (torch.float32, "<f4"), "F64": (torch.float64, "<f8")}  # safetensors is little-endian


# ---- safetensors: 8-byte little-endian header size, JSON header, raw data ----
def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        dt = next(k for k, (torch_dt, _) in ST_DTYPES.items() if torch_dt == t.dtype)
        data = t.detach().contiguous().numpy().astype(ST_DTYPES[dt][1]).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        s, e = h["data_offsets"]
        a = np.frombuffer(raw[8 + n + s:8 + n + e], dtype=ST_DTYPES[h["dtype"]][1]).reshape(h["shape"])
        out[name] = torch.from_numpy(a.astype(a.dtype.newbyteorder("=")))
    return out, meta


# ---- schedules (utils.cosine_scheduler; DINOLoss's teacher_temp_schedule) ----
def cosine_schedule(base, final, epochs, niter_per_ep, warmup_epochs=0, start_warmup=0.0):
    warmup_iters = warmup_epochs * niter_per_ep
    warmup = np.linspace(start_warmup, base, warmup_iters) if warmup_epochs > 0 else np.array([])
    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    return np.concatenate((warmup, final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / len(iters)))))


def schedules(c):
    base_lr = c["lr"] * c["batch_size"] * c["world_size"] / 256.0  # the linear scaling rule of main_dino
    return {"lr": cosine_schedule(base_lr, c["min_lr"], c["epochs"], c["niter_per_epoch"], c["warmup_epochs"]),
            "weight_decay": cosine_schedule(c["weight_decay"], c["weight_decay_end"], c["epochs"],
                                            c["niter_per_epoch"]),
            "momentum": cosine_schedule(c["momentum_teacher"], 1.0, c["epochs"], c["niter_per_epoch"]),
            "teacher_temp": np.concatenate((
                np.linspace(c["warmup_teacher_temp"], c["teacher_temp"], c["warmup_teacher_temp_epochs"]),
                np.ones(c["epochs"] - c["warmup_teacher_temp_epochs"]) * c["teacher_temp"]))}


# ---- model: parameter names as in DINO's state dicts ----
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hidden, self.heads = c["embed_dim"], int(c["embed_dim"] * c["mlp_ratio"]), c["num_heads"]
        self.norm1 = nn.LayerNorm(d, eps=c["layer_norm_eps"])
        self.attn = nn.Module()  # DINO's Attention: qkv, proj
        self.attn.qkv, self.attn.proj = nn.Linear(d, 3 * d, bias=c["mlp_qkv_bias"]), nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=c["layer_norm_eps"])
        self.mlp = nn.Module()  # DINO's Mlp: fc1, GELU, fc2
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):  # pre-norm; drop_path is 0
        B, N, C = x.shape
        qkv = self.attn.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5).softmax(dim=-1)
        x = x + self.attn.proj((attn @ v).transpose(1, 2).reshape(B, N, C))
        return x + self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(x)))), attn


class ViT(nn.Module):
    def __init__(self, c):
        super().__init__()
        grid = c.get("pos_embed_grid_size", c["global_size"]) // c["patch_size"]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c["embed_dim"]))
        self.pos_embed = nn.Parameter(torch.zeros(1, grid * grid + 1, c["embed_dim"]))
        self.patch_size, self.patch_embed = c["patch_size"], nn.Module()
        self.patch_embed.proj = nn.Conv2d(c["in_chans"], c["embed_dim"], c["patch_size"], stride=c["patch_size"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["depth"]))
        self.norm = nn.LayerNorm(c["embed_dim"], eps=c["layer_norm_eps"])

    def pos_encoding(self, npatch, w, h):
        # DINO's interpolate_pos_encoding: bicubic, with the scale factor
        # (not the output size) taken from (grid + 0.1) / trained grid.
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        dim, n = self.pos_embed.shape[-1], int(math.sqrt(N))
        w0, h0 = w // self.patch_size + 0.1, h // self.patch_size + 0.1
        p = F.interpolate(self.pos_embed[:, 1:].reshape(1, n, n, dim).permute(0, 3, 1, 2),
                          scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)), mode="bicubic")
        assert p.shape[-2:] == (int(w0), int(h0))
        return torch.cat((self.pos_embed[:, 0].unsqueeze(0), p.permute(0, 2, 3, 1).view(1, -1, dim)), dim=1)

    def tokens(self, x):
        w, h = x.shape[2], x.shape[3]
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return x + self.pos_encoding(x.shape[1] - 1, w, h)

    def forward(self, x, last_selfattention=False):
        x = self.tokens(x)
        for blk in self.blocks:
            x, attn = blk(x)
        return attn if last_selfattention else self.norm(x)[:, 0]


class DINOHead(nn.Module):
    def __init__(self, c, norm_last_layer):
        super().__init__()
        dims = [c["embed_dim"]] + [c["head_hidden_dim"]] * (max(c["head_nlayers"], 1) - 1) + [c["head_bottleneck_dim"]]
        layers = []
        for i in range(len(dims) - 1):
            layers += [nn.Linear(dims[i], dims[i + 1])] + ([nn.GELU()] if i < len(dims) - 2 else [])
        self.mlp = nn.Sequential(*layers)
        self.last_layer = nn.utils.weight_norm(nn.Linear(c["head_bottleneck_dim"], c["out_dim"], bias=False))
        self.last_layer.weight_g.requires_grad = not norm_last_layer  # norm_last_layer: rows keep norm 1

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCrop(nn.Module):
    def __init__(self, c, norm_last_layer):
        super().__init__()
        self.backbone, self.head = ViT(c), DINOHead(c, norm_last_layer)

    def forward(self, crops):
        # One backbone pass per run of consecutive crops of the same size.
        cls = torch.cat([self.backbone(torch.cat(list(g))) for _, g in groupby(crops, key=lambda x: x.shape[-1])])
        return cls, self.head(cls)


def init_weights(c, gen):
    """DINO's initialisation drawn from `gen` in float64 (trunc-normal 0.02 for
    linears and tokens, PyTorch's uniform for the conv and the last layer). The
    constant ones (LayerNorm 1/0, backbone biases 0, a trained weight_g 1) are
    perturbed so that a swapped or ignored norm, bias or weight_g shows.
    The head's biases stay 0: its activations shrink to ~1e-3 at the
    bottleneck, where a bias of that size would make all crops' outputs alike."""
    w = {}
    for name, p in MultiCrop(c, c["norm_last_layer"]).named_parameters():
        shape = p.shape
        if "patch_embed.proj" in name or "weight_v" in name:
            fan_in = c["in_chans"] * c["patch_size"] ** 2 if "patch_embed" in name else c["head_bottleneck_dim"]
            t = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) / math.sqrt(fan_in)
        elif "norm" in name and name.endswith("weight") or "weight_g" in name:
            scale = 0.0 if "weight_g" in name and c["norm_last_layer"] else 0.1
            t = 1 + scale * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("bias"):
            t = (0.02 if name.startswith("backbone") else 0.0) * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # DINO's trunc_normal_ cuts at +-2, 100 standard deviations: a plain normal
            t = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        w[name] = t
    return w


# ---- the training step of main_dino.train_one_epoch ----
class Trainer:
    def __init__(self, c, weights, dtype):
        self.c, self.sched = c, schedules(c)
        self.student = MultiCrop(c, c["norm_last_layer"]).to(dtype)
        self.teacher = MultiCrop(c, True).to(dtype)  # main_dino's teacher head keeps the default
        self.student.load_state_dict({k: v.to(dtype) for k, v in weights.items()})
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad = False
        # utils.get_params_groups: no weight decay on biases and 1-D (norm) tensors.
        params = [(n, p) for n, p in self.student.named_parameters() if p.requires_grad]
        no_decay = [p for n, p in params if n.endswith(".bias") or p.dim() == 1]
        decay = [p for n, p in params if not (n.endswith(".bias") or p.dim() == 1)]
        self.opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
        self.center = torch.zeros(1, c["out_dim"], dtype=dtype)

    def loss(self, student_out, teacher_out, temp):
        s = (student_out / self.c["student_temp"]).chunk(self.c["local_crops_number"] + 2)
        t = F.softmax((teacher_out - self.center) / temp, dim=-1).detach().chunk(2)
        total, n = 0, 0
        for iq, q in enumerate(t):
            for v in range(len(s)):
                if v != iq:
                    total += torch.sum(-q * F.log_softmax(s[v], dim=-1), dim=-1).mean()
                    n += 1
        return total / n

    def step(self, it, crops):
        c, epoch = self.c, it // self.c["niter_per_epoch"]
        lr, wd, m = (float(self.sched[k][it]) for k in ("lr", "weight_decay", "momentum"))
        temp = float(self.sched["teacher_temp"][epoch])
        for i, g in enumerate(self.opt.param_groups):
            g["lr"] = lr
            if i == 0:
                g["weight_decay"] = wd
        rec = {f"input.crop{i}": x for i, x in enumerate(crops)}
        _, teacher_out = self.teacher(crops[:2])
        cls, student_out = self.student(crops)
        loss = self.loss(student_out, teacher_out, temp)
        rec.update({"student.backbone_cls": cls.detach(), "student.output": student_out.detach(),
                    "teacher.output": teacher_out.detach(), "loss": loss.detach().reshape(1),
                    "center.before": self.center.clone()})
        # DINOLoss.update_center, after the loss: EMA of the teacher batch mean.
        batch_center = torch.sum(teacher_out.detach(), dim=0, keepdim=True) / (len(teacher_out) * c["world_size"])
        self.center = self.center * c["center_momentum"] + batch_center * (1 - c["center_momentum"])
        rec["center.after"] = self.center
        self.opt.zero_grad()
        loss.backward()
        named = list(self.student.named_parameters())
        if c["clip_grad"]:  # utils.clip_gradients: each tensor's norm on its own
            for _, p in named:
                if p.grad is not None:
                    coef = c["clip_grad"] / (p.grad.norm(2) + 1e-6)
                    if coef < 1:
                        p.grad.mul_(coef)
        if epoch < c["freeze_last_layer"]:  # utils.cancel_gradients_last_layer
            for n, p in named:
                if "last_layer" in n:
                    p.grad = None
        rec.update({"grad." + n: p.grad.clone() for n, p in named if p.grad is not None})  # as AdamW sees it
        self.opt.step()
        with torch.no_grad():  # EMA teacher, over all parameters (weight_g included)
            for q, k in zip(self.student.parameters(), self.teacher.parameters()):
                k.mul_(m).add_((1 - m) * q.detach())
            rec["teacher.last_selfattention.crop0"] = self.teacher.backbone(crops[0], True)
        rec.update({"student_after." + n: p.detach().clone() for n, p in named})
        rec.update({"teacher_after." + n: p.detach().clone() for n, p in self.teacher.named_parameters()})
        meta = {"iteration": it, "epoch": epoch, "lr": lr, "weight_decay": wd, "momentum": m, "teacher_temp": temp}
        return rec, meta


def generate(args):
    dtype = getattr(torch, args.dtype)
    c = dict(PRESETS[args.config_preset], **COMMON)
    c.update(seed=args.seed, pos_embed_grid_size=c["global_size"])
    gen = torch.Generator().manual_seed(args.seed)
    weights = init_weights(c, gen)
    sizes = [c["global_size"]] * 2 + [c["local_size"]] * c["local_crops_number"]
    crops = [[torch.randn(c["batch_size"], c["in_chans"], s, s, generator=gen, dtype=torch.float64).to(dtype)
              for s in sizes] for _ in range(2)]
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "weights.safetensors"), {k: v.to(dtype) for k, v in weights.items()},
                      {"note": "initial student weights; the teacher starts equal"})
    trainer, steps = Trainer(c, weights, dtype), []
    for it in range(2):
        rec, meta = trainer.step(it, crops[it])
        write_safetensors(os.path.join(args.out, f"step{it}.safetensors"), rec, meta)
        steps.append({"iteration": it, "epoch": meta["epoch"], "loss": rec["loss"].item()})
    s = trainer.sched
    # A longer lr schedule with warm-up, for the schedule test only.
    long_args = {"base_value": float(s["lr"].max()) / 2, "final_value": c["min_lr"], "epochs": 10, "niter_per_ep": 7,
                 "warmup_epochs": 2}
    s = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in s.items()}
    s["long_lr"] = torch.from_numpy(cosine_schedule(*long_args.values()))
    write_safetensors(os.path.join(args.out, "schedules.safetensors"), s, {"long_lr": json.dumps(long_args)})
    c.update(steps=steps, dtype=args.dtype,
             reference=f"tests/model/make_parity_fixture.py (DINO re-implemented), torch {torch.__version__}")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def check(fixture):
    """Replays a fixture from its own weights and crops; prints, per group, the
    worst max|got - want| / max|want| over its tensors. Weights are compared
    as updates (after - before), each side from its own before."""
    with open(os.path.join(fixture, "config.json")) as f:
        c = dict(COMMON, **json.load(f))
    weights, _ = read_safetensors(os.path.join(fixture, "weights.safetensors"))
    ref_sched, _ = read_safetensors(os.path.join(fixture, "schedules.safetensors"))
    sched = schedules(c)
    print("schedules: max abs difference %.3g" % max(float((torch.from_numpy(sched[k]) - ref_sched[k]).abs().max())
                                                     for k in sched))
    for dtype in (torch.float32, torch.float64):
        trainer = Trainer(c, weights, dtype)
        ref_before = {f"{net}_after.{k}": v for k, v in weights.items() for net in ("student", "teacher")}
        for step in c["steps"]:
            it = step["iteration"]
            ref, ref_meta = read_safetensors(os.path.join(fixture, f"step{it}.safetensors"))
            crops = [ref[f"input.crop{i}"].to(dtype) for i in range(c["local_crops_number"] + 2)]
            before = {f"{net}_after.{k}": v.detach().clone() for net in ("student", "teacher")
                      for k, v in getattr(trainer, net).state_dict().items()}
            rec, meta = trainer.step(it, crops)
            assert all(abs(float(ref_meta[k]) - float(v)) <= 1e-12 for k, v in meta.items()), (ref_meta, meta)
            assert set(ref) == set(rec), f"tensor sets differ: {sorted(set(ref) ^ set(rec))}"
            worst = {}
            for name, want in ref.items():
                got, want, floor = rec[name].double(), want.double(), 0.0
                group = "attention" if "selfattention" in name else name.split(".")[0]
                group = {"student": "forward", "teacher": "forward"}.get(group, group).replace("_after", " update")
                if name in before:
                    got, want = got - before[name].double(), want - ref_before[name].double()
                    # An update below a float32 ulp of the weights (the teacher's at lr 0) is rounding.
                    floor = 2.0 ** -23 * float(ref_before[name].abs().max())
                scale = max(float(want.abs().max()), floor, 1e-30)
                rel = float((got - want).abs().max()) / scale
                if group != "input" and rel > worst.get(group, (-1.0,))[0]:
                    worst[group] = (rel, name, " (of 1 float32 ulp of the weights)" if scale == floor else "")
            ref_before = {k: v for k, v in ref.items() if k in before}
            print(f"{str(dtype)[6:]} step {it}:")
            for g, (r, n, note) in sorted(worst.items()):
                print(f"  {g:15s} {r:.2e}  {n}{note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--config-preset", choices=sorted(PRESETS), default="other")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-against", metavar="DIR")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_against:
        check(args.check_against)
    elif args.out:
        generate(args)
    else:
        ap.error("give --out DIR or --check-against DIR")


if __name__ == "__main__":
    main()
