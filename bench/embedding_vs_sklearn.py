#!/usr/bin/env python3
"""The scikit-learn side of the embedding benchmark.

Generates a reproducible clustered feature set shaped like DINO features
(Gaussian clusters of unequal size and spread, rows L2-normalised), saves it
as .npy for bench/embedding_bench.cc, runs scikit-learn's Barnes-Hut TSNE on
it with its defaults (timed), and prints one JSON object with the time, the
trustworthiness (k = 10) of sklearn's embedding and where the files went.

Trustworthiness is computed block by block with exactly the ranking rule of
sklearn.manifold.trustworthiness (whose dense n x n matrices need ~10 GB at
n = 20000); --check-rows compares the two on a prefix of the data first.

With --umap-learn it also times umap-learn's UMAP with scdino-eval's settings
and reports its trustworthiness the same way.

Usage: OMP_NUM_THREADS=2 python3 bench/embedding_vs_sklearn.py --out /tmp/emb_bench
(Debian's python3 with python3-sklearn, 1.2+). Thread count: OMP_NUM_THREADS
for sklearn's gradient, --jobs for its kNN search. "seconds" is wall time,
"cpu_seconds" the process's CPU time (all threads), steadier on a shared
machine.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import sklearn
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE, trustworthiness
from sklearn.metrics import pairwise_distances
from sklearn.neighbors import NearestNeighbors


def make_features(n, d, clusters, seed):
    """Clustered rows: unequal cluster sizes and spreads, a shared low-rank
    nuisance direction set (like illumination or batch effects), unit rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.dirichlet(np.full(clusters, 4.0)) * n
    counts = np.maximum(np.floor(sizes).astype(np.int64), 1)
    counts[0] += n - counts.sum()
    centres = rng.standard_normal((clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spreads = rng.uniform(0.6, 1.2, clusters)
    nuisance = rng.standard_normal((4, d)) / np.sqrt(d)
    labels = np.repeat(np.arange(clusters), counts)
    rng.shuffle(labels)
    noise = rng.standard_normal((n, d)) / np.sqrt(d)
    x = centres[labels] + spreads[labels, None] * noise + rng.standard_normal((n, 4)) @ nuisance * 0.5
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), labels.astype(np.int64)


def blocked_trustworthiness(x, emb, k, block=512):
    """sklearn.manifold.trustworthiness (euclidean) without n x n arrays: the
    same distances (pairwise_distances), the same argsort-based ranks. Inputs
    go in as float64: given float32, sklearn rounds distances to float32 and
    near-ties reorder; the C++ side decides them in double."""
    x = np.asarray(x, dtype=np.float64)
    emb = np.asarray(emb, dtype=np.float64)
    n = x.shape[0]
    nn = NearestNeighbors(n_neighbors=k).fit(emb)
    ind_emb = nn.kneighbors(return_distance=False)
    total = 0.0
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        dist = pairwise_distances(x[r0:r1], x)
        dist[np.arange(r1 - r0), np.arange(r0, r1)] = np.inf
        order = np.argsort(dist, axis=1)
        inverted = np.zeros_like(order)
        rows = np.arange(r1 - r0)[:, None]
        inverted[rows, order] = np.arange(1, n + 1)[None, :]
        ranks = inverted[rows, ind_emb[r0:r1]] - k
        total += float(np.sum(ranks[ranks > 0]))
    return 1.0 - total * (2.0 / (n * k * (2.0 * n - 3.0 * k - 1.0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the .npy files")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--clusters", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="sklearn n_jobs for the kNN search")
    ap.add_argument("--k", type=int, default=10, help="trustworthiness neighbours")
    ap.add_argument("--check-rows", type=int, default=1000,
                    help="compare blocked and sklearn trustworthiness on this many rows first (0: skip)")
    ap.add_argument("--skip-tsne", action="store_true", help="only write the data set")
    ap.add_argument("--umap-learn", action="store_true",
                    help="also time umap-learn (Debian's umap-learn) with scdino-eval's UMAP settings: 30 neighbours, "
                         "min_dist 0.4, spread 1.1, 100 epochs, spectral init; numba compiles on a 500-row warm-up "
                         "first, which is timed apart")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    x, labels = make_features(args.n, args.d, args.clusters, args.seed)
    paths = {name: os.path.join(args.out, name + ".npy") for name in ("features", "labels", "pca2", "sklearn_tsne")}
    np.save(paths["features"], x)
    np.save(paths["labels"], labels)
    # The layout sklearn's init="pca" starts from, before its rescaling, so
    # the C++ side can start from the same place.
    np.save(paths["pca2"], PCA(n_components=2, svd_solver="randomized", random_state=args.seed)
            .fit_transform(x).astype(np.float32))
    result = {"n": args.n, "d": args.d, "clusters": args.clusters, "seed": args.seed,
              "sklearn": sklearn.__version__, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "files": paths}

    if args.check_rows > 0:
        m = min(args.check_rows, args.n)
        emb = PCA(n_components=2).fit_transform(x[:m])
        ours = blocked_trustworthiness(x[:m], emb, args.k, block=97)
        ref = trustworthiness(x[:m].astype(np.float64), emb.astype(np.float64), n_neighbors=args.k)
        result["trustworthiness_check"] = {"rows": m, "blocked": ours, "sklearn": ref}
        if abs(ours - ref) > 1e-12:
            print(json.dumps(result, indent=1))
            sys.exit("blocked trustworthiness differs from sklearn's")

    if not args.skip_tsne:
        # sklearn's defaults (1.2+): barnes_hut, angle 0.5, perplexity 30,
        # init "pca", learning_rate "auto", 1000 iterations.
        tsne = TSNE(n_components=2, method="barnes_hut", random_state=args.seed, n_jobs=args.jobs)
        t0, c0 = time.perf_counter(), time.process_time()
        emb = tsne.fit_transform(x)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        np.save(paths["sklearn_tsne"], emb.astype(np.float32))
        t0 = time.perf_counter()
        trust = blocked_trustworthiness(x, emb, args.k)
        result["sklearn_tsne"] = {
            "seconds": seconds, "cpu_seconds": cpu_seconds, "kl_divergence": float(tsne.kl_divergence_), "iterations": int(tsne.n_iter_),
            "learning_rate": float(tsne.learning_rate_), "trustworthiness": trust,
            "trustworthiness_seconds": time.perf_counter() - t0}
    if args.umap_learn:
        result["umap_learn"] = time_umap_learn(x, args)
    print(json.dumps(result, indent=1))


def time_umap_learn(x, args):
    """umap-learn's fit with scdino-eval's UMAP settings (its own parallel
    nearest-neighbour descent included, as our graph is in ours), after a
    warm-up fit that compiles its numba code."""
    import umap
    settings = dict(n_neighbors=30, min_dist=0.4, spread=1.1, n_components=2, n_epochs=100, metric="euclidean",
                    init="spectral", n_jobs=args.jobs)
    t0 = time.perf_counter()
    umap.UMAP(**settings).fit_transform(x[:500])
    warm_up = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    emb = umap.UMAP(**settings).fit_transform(x)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    trust = blocked_trustworthiness(x, emb, args.k)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "warm_up_seconds": warm_up, "trustworthiness": trust,
            "trustworthiness_seconds": time.perf_counter() - t0, "settings": settings}


if __name__ == "__main__":
    main()
