"""The seeds' data size end to end on this machine (docs/performance.md,
"The seeds' size end to end"): synthetic 50 x 50 x 5 cells in 8 class
folders, as many as the seeds' 90,852 + 22,712 images (113,568: 8 x 14,196),
through scdino-pack, scdino-stats, scdino-trainer (a bounded number of
steps, scdino.recipe: auto), scdino-features of that checkpoint and of a
random ViT, and scdino-eval of both (kNN, linear probe, k-means, t-SNE,
UMAP, plots, report). Each stage's wall time, images/s and peak RSS (its
process's own, from wait4), and the time of each evaluation step from its
progress line.

    python3 bench/seeds_scale.py [--per-class 14196] [--steps 100]
    python3 bench/seeds_scale.py --per-class 400 --steps 16 --threads 1 --check   # what CI runs

--check (the reduced run of scripts/test.sh) fails when a stage exceeds its
peak-RSS bound (--rss-bound-mb) or a long stage did not print its progress.
Prints one JSON line per stage, then a Markdown table.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The progress line each stage must print (common/progress.h's last line of
# a stage: "PREFIX: N UNIT in TIME"), by stage.
PROGRESS = {
    "pack": [r"scdino: indexing: \d+ images in", r"scdino-pack: \[0\] packing: \d+ images in"],
    "stats": [r"scdino: channel statistics: \d+ images in"],
    "train": [r"scdino-trainer: learning check: loading: \d+ images in"],
    "features": [r"scdino-features: \d+ images in"],
    "eval": [r"scdino-eval: queries? \d+|scdino-eval: \d+ queries in", r"scdino-eval: linear probe: \d+ fits in",
             r"scdino-eval: k-means: \d+ restarts in", r"scdino-eval: t-SNE: \d+ iterations in",
             r"scdino-eval: UMAP: \d+ epochs in"],
}
# "scdino-eval: t-SNE: 1000 iterations in 1:21 (12.3 iterations/s)": the steps' own times.
STEP = re.compile(r"^scdino-eval: (linear probe|k-means|t-SNE|UMAP): \d+ \w+ in ([0-9:]+|[0-9]+ s)")


def seconds(text):
    if text.endswith(" s"):
        return float(text[:-2])
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + float(part)
    return total


def run(stage, cmd, log_path, images, env, ok_codes=(0,)):
    t0 = time.time()
    with open(log_path, "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        # wait4: this child's own peak RSS (KiB), not the largest of all children's.
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    if child.returncode not in ok_codes:
        sys.stdout.write(open(log_path).read()[-3000:])
        sys.exit(f"{stage}: exit code {child.returncode} (log {log_path})")
    row = {"stage": stage, "seconds": round(wall, 1), "images": images,
           "images_per_second": round(images / wall, 1) if images else None,
           "peak_rss_mb": round(usage.ru_maxrss / 1024.0, 1), "log": log_path}
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-class", type=int, default=14196)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100, help="training iterations (global batch 32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-data", "seeds"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--check", action="store_true", help="fail on a bound or a missing progress line")
    ap.add_argument("--rss-bound-mb", type=float, default=3072, help="the peak RSS bound of every stage (--check)")
    a = ap.parse_args()
    images = a.per_class * a.classes
    data = os.path.join(a.dir, f"cells{images}")
    packed = os.path.join(a.dir, f"packed{images}")
    out = os.path.join(a.dir, "runs")
    logs = os.path.join(a.dir, "logs")
    os.makedirs(logs, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(packed, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), SCDINO_PROGRESS_SECONDS="10")
    b = lambda *p: os.path.join(a.build, "services", *p)  # noqa: E731
    if not os.path.isdir(data):
        t0 = time.time()
        subprocess.check_call([b("tools", "scdino-synth"), "--out", data, "--classes", str(a.classes), "--per-class",
                               str(a.per_class), "--channels", "5", "--size", "50", "--seed", "11",
                               "--difficulty", "0.6"], env=env)
        print(json.dumps({"stage": "synth (not timed below)", "seconds": round(time.time() - t0, 1)}), flush=True)
    config = os.path.join(a.dir, "seeds.yaml")
    with open(config, "w") as f:
        f.write(f"""meta:
  name_of_run: seeds
  output_dir: "{out}"
  dataset_dir: "{packed}"
  train_datasetsplit_fraction: 0.8
  seed: 40
  selected_channel_combination_per_run: ["01234"]
train_scDINO:
  batch_size_per_gpu: 32
  num_workers: {a.threads}
scdino:
  device: cpu
  threads: {a.threads}
  recipe: auto
  learning_check: auto
  control: {{enabled: false}}
  metrics: {{enabled: false}}
""")
    pack_config = os.path.join(a.dir, "pack.yaml")
    with open(pack_config, "w") as f:
        f.write(f'meta: {{dataset_dir: "{data}", output_dir: "{out}", name_of_run: pack}}\n')
    rows = [run("pack", [b("tools", "scdino-pack"), "--config", pack_config, "--out", packed, "--threads",
                         str(a.threads)], os.path.join(logs, "pack.log"), images, env)]
    rows.append(run("stats", [b("tools", "scdino-stats"), "--config", config], os.path.join(logs, "stats.log"),
                    images, env))
    # The statistics read a sample (train_scDINO.fraction_for_mean_std_calc): its count is theirs.
    sampled = re.search(r"channel statistics: (\d+) images in", open(rows[-1]["log"]).read())
    if sampled:
        rows[-1]["images"] = int(sampled.group(1))
        rows[-1]["images_per_second"] = round(rows[-1]["images"] / rows[-1]["seconds"], 1)
        rows[-1]["note"] = "a sample: fraction_for_mean_std_calc"
    # Exit 3: stopped at --stop-after-iterations, with a checkpoint.
    rows.append(run("train", [b("trainer", "scdino-trainer"), "--config", config, "--stop-after-iterations",
                              str(a.steps)], os.path.join(logs, "train.log"), a.steps * 32, env, ok_codes=(3,)))
    rows[-1]["note"] = f"{a.steps} iterations of 32"
    rows.append(run("features", [b("features", "scdino-features"), "--config", config], os.path.join(logs, "features.log"),
                    images, env))
    rows.append(run("features (random ViT)", [b("features", "scdino-features"), "--config", config, "--random-init"],
                    os.path.join(logs, "features-random.log"), images, env))
    for name in ("checkpoint", "random_init"):
        rows.append(run(f"eval ({name})", [b("eval", "scdino-eval"), "--config", config, "--features",
                                           os.path.join(out, "seeds", "features", name)],
                        os.path.join(logs, f"eval-{name}.log"), images, env))
        steps = {}
        for line in open(rows[-1]["log"]):
            m = STEP.match(line.strip())
            if m:
                steps[m.group(1)] = seconds(m.group(2))
        rows[-1]["steps_seconds"] = steps
        print(json.dumps({"stage": rows[-1]["stage"], "steps_seconds": steps}), flush=True)
    print()
    print("| stage | images | wall | images/s | peak RSS |")
    print("|---|---|---|---|---|")
    for r in rows:
        extra = ", ".join(f"{k} {v:.0f} s" for k, v in r.get("steps_seconds", {}).items())
        print(f"| {r['stage']}{' (' + r['note'] + ')' if 'note' in r else ''} | {r['images']:,} | {r['seconds']:.1f} s"
              f"{' (' + extra + ')' if extra else ''} | {r['images_per_second'] or 0:,.0f} | {r['peak_rss_mb']:,.0f} MiB |")
    if not a.check:
        return
    failures = []
    for r in rows:
        if r["peak_rss_mb"] > a.rss_bound_mb:
            failures.append(f"{r['stage']}: peak RSS {r['peak_rss_mb']} MiB above the bound {a.rss_bound_mb}")
        kind = r["stage"].split(" ")[0]
        text = open(r["log"]).read()
        for pattern in PROGRESS.get(kind, []):
            if kind == "train" and "no learning check" in text:
                continue
            if not re.search(pattern, text):
                failures.append(f"{r['stage']}: no progress line /{pattern}/ in {r['log']}")
    if failures:
        sys.exit("\n".join(failures))
    print("check: every stage within its bounds and every long stage printed its progress")


if __name__ == "__main__":
    main()
