#!/usr/bin/env python3
"""scdino-eval's linear probe and k-means against scikit-learn, on features
no one here made: scikit-learn's digits (1,797 images of 8x8 px, 10 classes;
the pixels as features, rows L2-normalised as DINO's features are).

The features go into a features directory (digits_features.py),
scdino-eval evaluates it, and
scikit-learn fits LogisticRegression(C) for every C of the same grid on the
same split: scdino's probe, whose C is chosen on a validation part of the
training rows, must be within 1 point of scikit-learn's best C on the test
rows. k-means: scdino's adjusted Rand index and NMI, recomputed by
scikit-learn from the obs['kmeans'] it wrote to the .h5ad, must equal the
reported ones, and its inertia (the k-means objective) within 1 % of
scikit-learn's KMeans(n_init=10).
Lines starting with FAIL: fail the test.

    probe_vs_sklearn.py SCDINO_EVAL WORK_DIR
"""
import json
import os
import sys
import time

import anndata
import numpy as np
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from digits_features import run_eval, write_digits

scdino_eval, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
features, config, x, y, train, test = write_digits(work, 0.25, "{tsne: false, umap: false}")
out, scdino_seconds = run_eval(scdino_eval, work, config, features)
results = json.load(open(os.path.join(out, "knn_results.json")))
probe, clusters = results["linear_probe"], results["clustering"]
failures = []

start = time.time()
scores = {}
for c in probe["C_grid"]:
    lr = LogisticRegression(C=c, max_iter=10000).fit(x[train], y[train])
    scores[c] = lr.score(x[test], y[test])
sklearn_seconds = time.time() - start
best_c = max(scores, key=scores.get)
print(f"linear probe: scdino top-1 {probe['top1_accuracy']:.4f} (C {probe['C']:g} chosen on "
      f"{probe['n_validation']} validation rows, {scdino_seconds:.1f} s for the whole eval); scikit-learn "
      f"{scores[probe['C']]:.4f} at that C, best {scores[best_c]:.4f} at C {best_c:g} "
      f"({sklearn_seconds:.1f} s for the grid)")
print("  scikit-learn per C: " + ", ".join(f"{c:g}: {s:.4f}" for c, s in scores.items()))
if abs(probe["top1_accuracy"] - scores[best_c]) > 0.01:
    failures.append(f"FAIL: linear probe top-1 {probe['top1_accuracy']:.4f} is more than 1 point from "
                    f"scikit-learn's best {scores[best_c]:.4f}")
if abs(probe["top1_accuracy"] - scores[probe["C"]]) > 0.01:
    failures.append(f"FAIL: at C {probe['C']:g} scdino's probe {probe['top1_accuracy']:.4f} differs from "
                    f"scikit-learn's {scores[probe['C']]:.4f} by more than 1 point")

adata = anndata.read_h5ad(os.path.join(out, "embeddings.h5ad"))
if "kmeans" not in adata.obs:
    failures.append("FAIL: embeddings.h5ad has no obs['kmeans']")
else:
    labels = adata.obs["class_index"].to_numpy()
    assigned = adata.obs["kmeans"].astype(str).to_numpy()
    ari, nmi = adjusted_rand_score(labels, assigned), normalized_mutual_info_score(labels, assigned)
    km = KMeans(n_clusters=10, n_init=10, random_state=0).fit(x[test].astype(np.float64))
    ref_ari = adjusted_rand_score(y[test], km.labels_)
    ref_nmi = normalized_mutual_info_score(y[test], km.labels_)
    print(f"k-means: scdino ARI {clusters['adjusted_rand_index']:.4f} NMI "
          f"{clusters['normalized_mutual_information']:.4f} (scikit-learn's scores of obs['kmeans']: {ari:.4f}, "
          f"{nmi:.4f}), inertia {clusters['inertia']:.3f}; scikit-learn KMeans(n_init=10): ARI {ref_ari:.4f} "
          f"NMI {ref_nmi:.4f}, inertia {km.inertia_:.3f}")
    if abs(ari - clusters["adjusted_rand_index"]) > 1e-9 or abs(nmi - clusters["normalized_mutual_information"]) > 1e-9:
        failures.append("FAIL: the reported ARI/NMI differ from scikit-learn's on the written assignment")
    if clusters["inertia"] > 1.01 * km.inertia_:
        failures.append(f"FAIL: scdino's k-means inertia {clusters['inertia']:.3f} is more than 1 % above "
                        f"scikit-learn's {km.inertia_:.3f}")
for line in failures:
    print(line)
sys.exit(1 if failures else 0)
