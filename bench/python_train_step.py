#!/usr/bin/python3
"""The facebookresearch/dino training step in PyTorch, the yardstick of
bench/train_step_bench.cc: the same ViT, DINO head, loss (with center),
per-parameter gradient clipping, AdamW with DINO's two parameter groups and
the teacher EMA, on random crops, after warm-up steps, in one process.
Written after the reference's vision_transformer.py, main_dino.py and
utils.py (not imported: the reference is not a package). Prints one JSON
line.

Two styles of the same step:
  reference  as main_dino.py writes it: attention as two matmuls and a
             softmax, one clip coefficient per parameter read on the host
             (`if clip_coef < 1`), torch.optim.AdamW's default
             implementation, the EMA parameter by parameter. What
             --count-ops compares scdino's step with (docs/performance.md).
  fast       what a PyTorch user would run on a GPU today: SDPA (torch 2.0+),
             fused AdamW (CUDA, torch 2.0+; foreach elsewhere), clipping and
             EMA as foreach ops with nothing read on the host, the loss's
             cross terms as one product. --compile adds torch.compile
             (torch 2.0+) around both networks.
--precision bf16 runs forward and loss under autocast (CUDA; CPU autocast
too, where it is slow). --count-ops profiles one more step with
torch.profiler (CPU activity, every scope) and reports every operator event
(nested ones included) and the host synchronisations among them
(aten::_local_scalar_dense, which every item() and tensor-as-bool reaches,
and copies to the CPU).

  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/python_train_step.py \\
      --arch vit_tiny --patch 16 --global-size 224 --local-size 96 \\
      --local-crops 8 --batch 8 --out-dim 65536 --steps 3 --threads 2
  /usr/bin/python3 bench/python_train_step.py --arch vit_small --batch 2 \\
      --steps 1 --count-ops
  python3 bench/python_train_step.py --device cuda --precision bf16 \\
      --style fast [--compile] --arch vit_small --batch 128
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHS = {"vit_tiny": (192, 3), "vit_small": (384, 6), "vit_base": (768, 12)}
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


class Attention(nn.Module):
    def __init__(self, dim, heads, sdpa):
        super().__init__()
        self.heads, self.scale, self.sdpa = heads, (dim // heads) ** -0.5, sdpa
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads, drop_path, sdpa):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads, sdpa)
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
    def __init__(self, chans, patch, dim, depth, heads, drop_path, img, sdpa):
        super().__init__()
        self.patch_embed = nn.Conv2d(chans, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, drop_path * i / max(depth - 1, 1), sdpa)
                                     for i in range(depth)])
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
    """DINO's MultiCropWrapper: one backbone pass per run of equal sizes."""

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


def dino_loss_reference(s_out, t_out, center, ncrops):
    s_chunks = (s_out / 0.1).chunk(ncrops)
    t_chunks = F.softmax((t_out - center) / 0.04, dim=-1).detach().chunk(2)
    loss, terms = 0, 0
    for iq, q in enumerate(t_chunks):
        for v in range(ncrops):
            if v != iq:
                loss = loss + torch.sum(-q * F.log_softmax(s_chunks[v], dim=-1), dim=-1).mean()
                terms += 1
    return loss / terms


def dino_loss_fast(s_out, t_out, center, ncrops):
    # sum over pairs (iq != v) of -q_iq . log p_v: every pair in one product,
    # minus the same-view pairs.
    b = t_out.shape[0] // 2
    logp = F.log_softmax(s_out.float() / 0.1, dim=-1).view(ncrops, b, -1)
    q = F.softmax((t_out.float() - center) / 0.04, dim=-1).detach().view(2, b, -1)
    cross = torch.einsum("tbk,vbk->tv", q, logp)
    same = cross[0, 0] + cross[1, 1]
    return -(cross.sum() - same) / (b * (2 * ncrops - 2))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="vit_tiny", choices=sorted(ARCHS))
    for k, v in [("patch", 16), ("channels", 5), ("global-size", 224), ("local-size", 96), ("local-crops", 8),
                 ("batch", 8), ("out-dim", 65536), ("depth", 12), ("steps", 3), ("warmup", 1), ("threads", 2)]:
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--style", default="reference", choices=["reference", "fast"])
    p.add_argument("--compile", action="store_true", help="torch.compile both networks (torch 2.0+)")
    p.add_argument("--count-ops", action="store_true", help="profile one more step: operator events and host syncs")
    a = p.parse_args()
    if a.compile and not hasattr(torch, "compile"):
        p.error("--compile needs torch 2.0 or later; this is " + torch.__version__)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    fast = a.style == "fast"
    sdpa = fast and hasattr(F, "scaled_dot_product_attention")
    dim, heads = ARCHS[a.arch]
    net = lambda dp: MultiCrop(ViT(a.channels, a.patch, dim, a.depth, heads, dp, a.global_size, sdpa),
                               Head(dim, a.out_dim)).to(dev)
    student, teacher = net(0.1), net(0.0)
    teacher.load_state_dict(student.state_dict())
    for q in teacher.parameters():
        q.requires_grad = False
    s_params = [q for q in student.parameters() if q.requires_grad]
    t_params = [q for q, s in zip(teacher.parameters(), student.parameters()) if s.requires_grad]
    regularized = [q for n, q in student.named_parameters() if q.requires_grad and not (n.endswith(".bias") or q.ndim == 1)]
    rest = [q for n, q in student.named_parameters() if q.requires_grad and (n.endswith(".bias") or q.ndim == 1)]
    groups = [{"params": regularized}, {"params": rest, "weight_decay": 0.0}]
    optimizer_impl = "default"
    if fast and a.device == "cuda" and TORCH2:
        opt, optimizer_impl = torch.optim.AdamW(groups, lr=1e-4, fused=True), "fused"
    elif fast:
        opt, optimizer_impl = torch.optim.AdamW(groups, lr=1e-4, foreach=True), "foreach"
    else:
        opt = torch.optim.AdamW(groups, lr=1e-4)
    s_fwd, t_fwd = student, teacher
    if a.compile:
        s_fwd, t_fwd = torch.compile(student), torch.compile(teacher)
    center = torch.zeros(1, a.out_dim, device=dev)
    ncrops = 2 + a.local_crops
    crops = [torch.randn(a.batch, a.channels, s, s, device=dev)
             for s in [a.global_size] * 2 + [a.local_size] * a.local_crops]
    autocast = (lambda: torch.autocast(a.device, dtype=torch.bfloat16)) if a.precision == "bf16" else None

    def step():
        nonlocal center
        with (autocast() if autocast else torch.no_grad()):
            with torch.no_grad():
                t_out = t_fwd(crops[:2])
        with (autocast() if autocast else torch.enable_grad()):
            s_out = s_fwd(crops)
            loss = (dino_loss_fast if fast else dino_loss_reference)(s_out, t_out, center, ncrops)
        opt.zero_grad()
        loss.backward()
        if fast:
            # DINO's per-parameter clip (each gradient to norm <= 3) on the device.
            grads = [q.grad for q in s_params]
            norms = torch._foreach_norm(grads) if hasattr(torch, "_foreach_norm") else [g.norm(2) for g in grads]
            coefs = [(3.0 / (n + 1e-6)).clamp(max=1.0) for n in norms]
            torch._foreach_mul_(grads, coefs) if TORCH2 else [g.mul_(c) for g, c in zip(grads, coefs)]
        else:
            for q in student.parameters():
                if q.grad is not None:
                    norm = q.grad.data.norm(2)
                    clip = 3.0 / (norm + 1e-6)
                    if clip < 1:
                        q.grad.data.mul_(clip)
        opt.step()
        with torch.no_grad():
            center = center * 0.9 + torch.sum(t_out.float(), dim=0, keepdim=True) / len(t_out) * 0.1
            if fast:
                torch._foreach_mul_(t_params, 0.996)
                torch._foreach_add_(t_params, s_params, alpha=1 - 0.996)
            else:
                for ps, pt in zip(student.parameters(), teacher.parameters()):
                    pt.data.mul_(0.996).add_((1 - 0.996) * ps.detach().data)

    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    secs = time.perf_counter() - t0
    r = {"benchmark": "python_train_step", "style": a.style, "compile": a.compile, "arch": a.arch,
         "patch": a.patch, "channels": a.channels, "global_size": a.global_size, "local_size": a.local_size,
         "local_crops": a.local_crops, "batch": a.batch, "out_dim": a.out_dim, "device": a.device,
         "precision": a.precision, "attention": "sdpa" if sdpa else "matmul-softmax", "optimizer": optimizer_impl,
         "threads": a.threads, "torch": torch.__version__, "steps": a.steps,
         "step_s": secs / a.steps, "images_per_s": a.batch * a.steps / secs}
    if a.device == "cuda":
        r["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    if a.count_ops:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
            sync()
        events = prof.events()
        syncs = sum(1 for e in events if e.name == "aten::_local_scalar_dense")

        def inside_cpu_bmm(e):
            p = e.cpu_parent
            while p is not None:
                if p.name in ("aten::bmm", "aten::baddbmm"):
                    return True
                p = p.cpu_parent
            return False

        r["aten_ops_per_step"] = len(events)
        r["host_syncs_per_step"] = syncs
        # LibTorch 1.13's CPU bmm without MKL loops over the matrices of a
        # batch, recording a select, as_strided and resolve_conj for each
        # (more with every image and head); a GPU's bmm is one call.
        if a.device == "cpu":
            r["aten_ops_per_step_without_cpu_bmm_loop"] = len(events) - sum(1 for e in events if inside_cpu_bmm(e))
    print(json.dumps(r))


if __name__ == "__main__":
    main()
