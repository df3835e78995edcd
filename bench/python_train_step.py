#!/usr/bin/python3
"""The facebookresearch/dino training step in PyTorch, the yardstick of
bench/train_step_bench.cc: the same ViT, DINO head, loss (with center),
per-parameter gradient clipping, AdamW with DINO's two parameter groups and
the teacher EMA, on random crops, after warm-up steps, in one process with
the given threads. Written after the reference's vision_transformer.py,
main_dino.py and utils.py (not imported: the reference is not a package).
Prints one JSON line.

  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/python_train_step.py \
      --arch vit_tiny --patch 16 --global-size 224 --local-size 96 \
      --local-crops 8 --batch 8 --out-dim 65536 --steps 3 --threads 2
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHS = {"vit_tiny": (192, 3), "vit_small": (384, 6), "vit_base": (768, 12)}


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads, drop_path):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop_path = drop_path

    def dp(self, x):
        if not self.training or self.drop_path == 0:
            return x
        keep = 1 - self.drop_path
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x.div(keep) * mask

    def forward(self, x):
        x = x + self.dp(self.attn(self.norm1(x)))
        return x + self.dp(self.mlp(self.norm2(x)))


class ViT(nn.Module):
    def __init__(self, chans, patch, dim, depth, heads, drop_path, img):
        super().__init__()
        self.patch_embed = nn.Conv2d(chans, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, drop_path * i / max(depth - 1, 1)) for i in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def pos(self, x, w, h):
        n = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if n == N and w == h:
            return self.pos_embed
        cls, patch = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        side = int(math.sqrt(N))
        patch = F.interpolate(patch.reshape(1, side, side, -1).permute(0, 3, 1, 2),
                              scale_factor=(math.sqrt(n) / side + 0.1 / side,) * 2, mode="bicubic")
        return torch.cat((cls, patch.permute(0, 2, 3, 1).reshape(1, -1, patch.shape[1])), dim=1)

    def forward(self, x):
        b, _, w, h = x.shape
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1)
        x = x + self.pos(x, w, h)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)[:, 0]


class Head(nn.Module):
    def __init__(self, dim, out_dim, hidden=2048, bottleneck=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, bottleneck))
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        self.last_layer.weight_g.requires_grad = False

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCrop(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, crops):
        sizes = torch.tensor([c.shape[-1] for c in crops])
        ends = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        out, start = [], 0
        for end in ends:
            out.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return self.head(torch.cat(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="vit_tiny", choices=sorted(ARCHS))
    for k, v in [("patch", 16), ("channels", 5), ("global-size", 224), ("local-size", 96), ("local-crops", 8),
                 ("batch", 8), ("out-dim", 65536), ("depth", 12), ("steps", 3), ("warmup", 1), ("threads", 2)]:
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dim, heads = ARCHS[a.arch]
    net = lambda dp: MultiCrop(ViT(a.channels, a.patch, dim, a.depth, heads, dp, a.global_size), Head(dim, a.out_dim))
    student, teacher = net(0.1), net(0.0)
    teacher.load_state_dict(student.state_dict())
    for q in teacher.parameters():
        q.requires_grad = False
    regularized = [q for n, q in student.named_parameters() if q.requires_grad and not (n.endswith(".bias") or q.ndim == 1)]
    rest = [q for n, q in student.named_parameters() if q.requires_grad and (n.endswith(".bias") or q.ndim == 1)]
    opt = torch.optim.AdamW([{"params": regularized}, {"params": rest, "weight_decay": 0.0}], lr=1e-4)
    center = torch.zeros(1, a.out_dim)
    ncrops = 2 + a.local_crops
    crops = [torch.randn(a.batch, a.channels, s, s) for s in [a.global_size] * 2 + [a.local_size] * a.local_crops]

    def step():
        nonlocal center
        t_out = teacher(crops[:2])
        s_out = student(crops)
        s_chunks = (s_out / 0.1).chunk(ncrops)
        t_chunks = F.softmax((t_out - center) / 0.04, dim=-1).detach().chunk(2)
        loss, terms = 0, 0
        for iq, q in enumerate(t_chunks):
            for v in range(ncrops):
                if v != iq:
                    loss = loss + torch.sum(-q * F.log_softmax(s_chunks[v], dim=-1), dim=-1).mean()
                    terms += 1
        loss = loss / terms
        opt.zero_grad()
        loss.backward()
        for q in student.parameters():
            if q.grad is not None:
                norm = q.grad.data.norm(2)
                clip = 3.0 / (norm + 1e-6)
                if clip < 1:
                    q.grad.data.mul_(clip)
        opt.step()
        with torch.no_grad():
            center = center * 0.9 + torch.sum(t_out, dim=0, keepdim=True) / len(t_out) * 0.1
            for ps, pt in zip(student.parameters(), teacher.parameters()):
                pt.data.mul_(0.996).add_((1 - 0.996) * ps.detach().data)

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - t0
    print(json.dumps({"benchmark": "python_train_step", "arch": a.arch, "patch": a.patch, "batch": a.batch,
                      "out_dim": a.out_dim, "threads": a.threads, "torch": torch.__version__,
                      "step_s": secs / a.steps, "images_per_s": a.batch * a.steps / secs}))


if __name__ == "__main__":
    main()
