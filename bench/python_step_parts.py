#!/usr/bin/env python3
"""Parts of the DINO training step timed one by one, without a profiler.

The shapes are those of bench/train_step_bench.cc's comparison run (vit_tiny/16,
batch 8, 2 x 224 + 8 x 96 crops): the MLP and attention core of one block for
the global and the local crops, exact GELU forward and backward, and matrix
products of the linear layers and of attention. Debian's PyTorch runs the same
CPU kernels as our LibTorch, so the rates say where either step spends its
time (docs/performance.md).

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/python_step_parts.py --threads 2
"""
import argparse
import json
import time

import torch


def timed(f, repeats):
    f()
    start = time.perf_counter()
    for _ in range(repeats):
        f()
    return (time.perf_counter() - start) / repeats


def attention_core(x, batch, tokens, heads=3, head_dim=64):
    t = x.reshape(batch, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = t[0], t[1], t[2]
    a = (q @ k.transpose(-2, -1) * head_dim ** -0.5).softmax(-1)
    return (a @ v).transpose(1, 2).reshape(batch, tokens, heads * head_dim)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    out = {"threads": a.threads, "torch": torch.__version__}
    groups = {"global": (16, 197), "local": (64, 37)}  # crops x tokens
    per_step = 0.0
    for name, (batch, tokens) in groups.items():
        x = torch.randn(batch, tokens, 576, requires_grad=True)

        def forward_backward():
            y = attention_core(x, batch, tokens)
            y.backward(torch.ones_like(y))

        def forward():
            with torch.no_grad():
                attention_core(x, batch, tokens)

        fb, f = timed(forward_backward, a.repeats), timed(forward, a.repeats)
        flops = 3 * 2 * 2 * batch * 3 * tokens * tokens * 64
        out[f"attention_{name}_fwd_bwd_ms"] = fb * 1e3
        out[f"attention_{name}_gflops"] = flops / fb / 1e9
        # 12 blocks: the student forward and backward, the teacher forward of the global crops.
        per_step += 12 * (fb + (f if name == "global" else 0.0))

        rows = batch * tokens
        h = torch.randn(rows, 192, requires_grad=True)
        w1 = torch.randn(768, 192, requires_grad=True)
        w2 = torch.randn(192, 768, requires_grad=True)

        def mlp():
            y = torch.nn.functional.gelu(h @ w1.t()) @ w2.t()
            y.backward(torch.ones_like(y))

        t = timed(mlp, a.repeats)
        out[f"mlp_{name}_fwd_bwd_ms"] = t * 1e3
        out[f"mlp_{name}_gflops"] = 3 * 2 * 2 * rows * 192 * 768 / t / 1e9
    out["attention_core_per_step_s"] = per_step

    x, g = torch.randn(3152, 768), torch.randn(3152, 768)
    out["gelu_fwd_ms"] = timed(lambda: torch.nn.functional.gelu(x), 20) * 1e3
    out["gelu_bwd_ms"] = timed(lambda: torch.ops.aten.gelu_backward(g, x), 20) * 1e3
    for m, k, n in [(3152, 192, 576), (3152, 192, 768), (3152, 768, 192), (192, 3152, 768), (80, 256, 65536)]:
        l, r = torch.randn(m, k), torch.randn(k, n)
        out[f"mm_{m}x{k}x{n}_gflops"] = 2 * m * k * n / timed(lambda: torch.mm(l, r), 20) / 1e9
    q, kt = torch.randn(48, 197, 64), torch.randn(48, 64, 197)
    t = timed(lambda: torch.bmm(q, kt), 20)
    out["bmm_48x197x64x197_ms"] = t * 1e3
    out["bmm_48x197x64x197_gflops"] = 2 * 48 * 197 * 197 * 64 / t / 1e9
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
