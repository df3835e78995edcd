#!/usr/bin/python3
"""Scaling across the test cluster's nodes (docs/distributed.md#scaling-measured).

On the cluster of scripts/slurm-cluster.sh (started here if it is not up),
for each link (unshaped, then tc tbf at 10 Gbit/s and 1 Gbit/s on every
node's veth):
  - scdino-preflight on 2 nodes x 1 task: the all-reduce bus bandwidth of
    the largest size against the shaped rate;
  - scdino-trainer through train.sbatch on 1 node x 1 task, 1 node x 2
    tasks, 2 nodes x 1 task and 2 nodes x 2 tasks, with the bucketed
    all-reduce launched from backward's hooks (scdino.bucket_mb 4: the
    gradients go out while backward still runs) and without overlap
    (bucket_mb 4096: one bucket, sent after backward): the mean step time
    after the first epoch, images/s, and the time a step waited for the
    all-reduce.

Every node is a namespace on this one machine, so all ranks share its
cores: the figures show what the links and the overlap cost, not what more
GPUs would buy (the table in docs says so).

  bench/cluster_scaling.py [--epochs N] [--images N] [--links off,10gbit,1gbit]

Prints a Markdown table; run it as root on an otherwise idle machine.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(SRC, "build")
CLUSTER = os.path.join(SRC, "scripts", "slurm-cluster.sh")
WORK = os.path.join(BUILD, "bench-data", "cluster-scaling")

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=4)
ap.add_argument("--images", type=int, default=256)
ap.add_argument("--links", default="off,10gbit,1gbit")
args = ap.parse_args()


def run(*a, env=None, check=True):
    r = subprocess.run(a, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(a)}: exit {r.returncode}: {(r.stdout + r.stderr)[-2000:]}")
    return r


run("bash", CLUSTER, "start")
env = dict(os.environ)
for line in run("bash", CLUSTER, "env").stdout.splitlines():
    k, v = line.replace("export ", "", 1).split("=", 1)
    env[k] = v.replace("$PATH", os.environ["PATH"])
env["OMP_WAIT_POLICY"] = "PASSIVE"
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
cells = os.path.join(WORK, "cells")
run(os.path.join(BUILD, "services/tools/scdino-synth"), "--out", cells, "--classes", "2", "--per-class",
    str(args.images // 2), "--channels", "3", "--size", "32", "--seed", "3")


def config(name, bucket_mb):
    path = os.path.join(WORK, name + ".yaml")
    # A model with ~11 MB of gradients: at 1 Gbit/s one all-reduce of them
    # takes about as long as the step's compute on this machine.
    open(path, "w").write(f"""meta: {{name_of_run: {name}, output_dir: "{WORK}/runs", dataset_dir: "{cells}", seed: 5,
       selected_channel_combination_per_run: ["012"]}}
train_scDINO:
  epochs: {args.epochs}
  saveckp_freq: 100
  batch_size_per_gpu: 8
  num_workers: 1
  hyperparameters: {{arch: vit_tiny, embed_dim: 192, depth: 4, num_heads: 3, patch_size: 8, global_crops_size: 32,
                    local_crops_size: 16, local_crops_number: 2, out_dim: 4096, head_hidden_dim: 256,
                    head_bottleneck_dim: 64, warmup_epochs: 1, drop_path_rate: 0.0}}
scdino: {{threads: 1, bucket_mb: {bucket_mb}, learning_check: off, control: {{enabled: false}},
          metrics: {{enabled: false}}, preflight: {{min_bytes: 1048576, max_bytes: 67108864, factor: 4,
                    seconds_per_size: 2.0}}}}
""")
    return path


def job(args_, name, cfg, exports=""):
    out = os.path.join(WORK, name + "-%j.out")
    r = run("sbatch", "--parsable", f"--output={out}", f"--export=ALL,SCDINO_BIN={BUILD}/services/trainer{exports}",
            *args_, os.path.join(SRC, "deploy/slurm/train.sbatch"), cfg, env=env)
    jid = r.stdout.strip()
    while run("squeue", "-h", "-j", jid, env=env, check=False).stdout.strip():
        time.sleep(1)
    return open(out.replace("%j", jid)).read()


layouts = [("1 x 1", ["--nodes=1", "--ntasks=1"]), ("1 x 2", ["--nodes=1", "--ntasks-per-node=2"]),
           ("2 x 1", ["--nodes=2", "--ntasks-per-node=1"]), ("2 x 2", ["--nodes=2", "--ntasks-per-node=2"])]
rows = []
busbw = {}
for link in args.links.split(","):
    run("bash", CLUSTER, "shape", link)
    out = job(["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"], f"preflight-{link}", config("pf", 4),
              exports=",SCDINO_PREFLIGHT=1")
    m = re.findall(r"^\s+(\d+)\s+\d+\s+float\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)$", out, re.M)
    busbw[link] = float(m[-1][1]) if m else float("nan")
    for label, lay in layouts:
        for mode, bucket in (("overlap", 4), ("no overlap", 4096)):
            name = f"{link}-{label.replace(' ', '')}-{bucket}"
            cfg = config(name, bucket)
            job(lay + ["--cpus-per-task=1"], name, cfg, exports=",SCDINO_PREFLIGHT=0")
            lines = [json.loads(x) for x in open(os.path.join(WORK, "runs", name, "log.jsonl"))]
            later = lines[1:] or lines
            niter = lines[0]["iteration"]
            step = sum(x["epoch_time_s"] for x in later) / len(later) / niter
            wait = sum(x.get("allreduce_wait_s", 0.0) for x in later) / len(later) / niter
            ranks = 1 if label == "1 x 1" else (2 if label in ("1 x 2", "2 x 1") else 4)
            rows.append((link, label, mode, step, 8 * ranks / step, wait))
            print(f"{link:7} {label} {mode:10}: step {step * 1000:.0f} ms, {8 * ranks / step:.1f} images/s, "
                  f"all-reduce wait {wait * 1000:.1f} ms", flush=True)
run("bash", CLUSTER, "shape", "off")

print("\n| link | preflight busbw (2 nodes x 1) | layout (nodes x tasks) | step, overlap | step, no overlap | "
      "images/s, overlap | all-reduce wait a step, overlap / not | overlap's gain |")
print("|---|---|---|---|---|---|---|---|")
for link in args.links.split(","):
    for label, _ in layouts:
        o = next(r for r in rows if r[0] == link and r[1] == label and r[2] == "overlap")
        n = next(r for r in rows if r[0] == link and r[1] == label and r[2] == "no overlap")
        print(f"| {link} | {busbw[link]:.3f} GB/s | {label} | {o[3] * 1000:.0f} ms | {n[3] * 1000:.0f} ms | "
              f"{o[4]:.1f} | {o[5] * 1000:.1f} / {n[5] * 1000:.1f} ms | {n[3] / o[3]:.2f}x |")
