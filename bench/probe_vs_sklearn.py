#!/usr/bin/env python3
"""The linear probe: scdino-eval's against scikit-learn's, on the same rows.

Generates features shaped like DINO CLS features (unit rows, overlapping
classes of unequal size, a shared low-rank nuisance, so that top-1 is far
from 1), saves them as .npy and times both with the same protocol
(eval/linear_probe.h): C chosen over the grid on a stratified 20%
validation part of the training rows, then the chosen C refitted on every
training row, top-1 on the test rows.
  - scikit-learn: LogisticRegression(solver="lbfgs") with its defaults
    (tol 1e-4, max_iter 100: what a user gets; --sklearn-max-iter changes it);
  - scdino: scdino-bench-probe (bench/probe_bench.cc) on the same files.
Prints one JSON object; exits 1 when scdino's top-1 is more than 0.005 from
scikit-learn's, or (--require-faster) when scdino took longer.

Usage: OMP_NUM_THREADS=2 python3 bench/probe_vs_sklearn.py \\
         --bench build/bench/scdino-bench-probe --out /tmp/probe [--train 48000 --test 12000]
(Debian's python3 with python3-sklearn.) Both sides use the same threads:
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS for scikit-learn's BLAS, --threads
for scdino.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def make_features(n, d, classes, separation, seed):
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(classes, 6.0))
    labels = rng.choice(classes, size=n, p=weights)
    centres = rng.standard_normal((classes, d))
    centres *= separation / np.linalg.norm(centres, axis=1, keepdims=True)
    nuisance = rng.standard_normal((8, d)) / np.sqrt(d)
    x = centres[labels] + rng.standard_normal((n, d)) / np.sqrt(d) + rng.standard_normal((n, 8)) @ nuisance * 0.7
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), labels.astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="scdino-bench-probe")
    ap.add_argument("--out", required=True, help="directory for the .npy files")
    ap.add_argument("--train", type=int, default=48000)
    ap.add_argument("--test", type=int, default=12000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--separation", type=float, default=0.45, help="class centres' norm against unit noise")
    ap.add_argument("--grid", default="0.01,0.1,1,10,100,1000")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sklearn-max-iter", type=int, default=100)
    ap.add_argument("--require-faster", action="store_true")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    x, y = make_features(args.train + args.test, args.d, args.classes, args.separation, args.seed)
    x_train, y_train, x_test, y_test = x[:args.train], y[:args.train], x[args.train:], y[args.train:]
    for name, a in (("x_train", x_train), ("y_train", y_train), ("x_test", x_test), ("y_test", y_test)):
        np.save(os.path.join(args.out, name + ".npy"), a)
    grid = sorted(float(c) for c in args.grid.split(","))

    # scikit-learn, the same protocol.
    warnings.simplefilter("ignore", ConvergenceWarning)
    t0 = time.perf_counter()
    x_fit, x_val, y_fit, y_val = train_test_split(x_train, y_train, test_size=0.2, stratify=y_train,
                                                  random_state=args.seed)
    validation = []
    for c in grid:
        m = LogisticRegression(C=c, solver="lbfgs", max_iter=args.sklearn_max_iter).fit(x_fit, y_fit)
        validation.append(float((m.predict(x_val) == y_val).mean()))
    best = grid[int(np.argmax(validation))]
    final = LogisticRegression(C=best, solver="lbfgs", max_iter=args.sklearn_max_iter).fit(x_train, y_train)
    sk_top1 = float((final.predict(x_test) == y_test).mean())
    sk_seconds = time.perf_counter() - t0
    result = {"train": args.train, "test": args.test, "d": args.d, "classes": args.classes,
              "sklearn_version": sklearn.__version__, "threads": args.threads,
              "sklearn": {"seconds": sk_seconds, "top1": sk_top1, "c": best, "validation": validation,
                          "max_iter": args.sklearn_max_iter, "final_iterations": int(final.n_iter_.max())}}

    r = subprocess.run([args.bench, "--dir", args.out, "--c-grid", args.grid, "--threads", str(args.threads)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{args.bench} failed: {r.stderr.strip()}")
    ours = json.loads(r.stdout.strip().splitlines()[-1])
    result["scdino"] = {k: ours[k] for k in ("seconds", "top1", "c", "validation", "final_iterations")}
    result["speedup_over_sklearn"] = sk_seconds / ours["seconds"]
    result["top1_difference"] = ours["top1"] - sk_top1
    print(json.dumps(result, indent=1))
    if abs(ours["top1"] - sk_top1) > 0.005:
        sys.exit(f"scdino's probe top-1 {ours['top1']:.4f} is more than 0.005 from scikit-learn's {sk_top1:.4f}")
    if args.require_faster and ours["seconds"] > sk_seconds:
        sys.exit(f"scdino's probe took {ours['seconds']:.1f} s, scikit-learn {sk_seconds:.1f} s")


if __name__ == "__main__":
    main()
