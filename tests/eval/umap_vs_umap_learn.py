#!/usr/bin/env python3
"""scdino-eval's UMAP against umap-learn (Debian's umap-learn, the method's
own implementation), side by side on features no one here made:
scikit-learn's digits (digits_features.py), 1,348 test rows.

scdino-eval embeds the test rows (obsm['X_umap'] of embeddings.h5ad),
starting from its spectral initialisation (it must converge here);
umap-learn embeds the same rows with the same settings (30 neighbours,
min_dist 0.4, spread 1.1, 100 epochs, spectral initialisation). Both
layouts are scored by scikit-learn's trustworthiness (k = 10) in the
feature space: scdino's must be within 0.01 of umap-learn's, and both must
keep the classes apart (the 10-NN accuracy of the classes in the layout
within 0.03 of umap-learn's). Prints both scores and times.
Lines starting with FAIL: fail the test.

    umap_vs_umap_learn.py SCDINO_EVAL WORK_DIR
"""
import json
import os
import sys
import time

import anndata
import numpy as np
from sklearn.manifold import trustworthiness
from sklearn.neighbors import KNeighborsClassifier
from sklearn.model_selection import cross_val_score

from digits_features import run_eval, write_digits

scdino_eval, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
features, config, x, y, _, test = write_digits(work, 0.75, "{tsne: false, umap: true, linear_probe: false, kmeans: false}")
out, scdino_seconds = run_eval(scdino_eval, work, config, features)
init = json.load(open(os.path.join(out, "knn_results.json")))["embeddings"]["umap"]["init"]
if init != "spectral":
    print(f"FAIL: scdino's UMAP started from '{init}', not from its spectral initialisation (Spectra's Lanczos)")
    sys.exit(1)
adata = anndata.read_h5ad(os.path.join(out, "embeddings.h5ad"))
if "X_umap" not in adata.obsm:
    print("FAIL: embeddings.h5ad has no obsm['X_umap']")
    sys.exit(1)
rows = np.array([int(name) for name in adata.obs_names])
ours = np.asarray(adata.obsm["X_umap"], dtype=np.float64)
if sorted(rows.tolist()) != sorted(test.tolist()):
    print(f"FAIL: X_umap holds {len(rows)} rows, not the {len(test)} test rows")
    sys.exit(1)

import umap  # noqa: E402  (Debian's umap-learn; numba compiles on first use)

start = time.time()
theirs = umap.UMAP(n_neighbors=30, min_dist=0.4, spread=1.1, n_components=2, n_epochs=100, metric="euclidean",
                   init="spectral", random_state=0).fit_transform(x[rows])
umap_learn_seconds = time.time() - start

data = x[rows].astype(np.float64)
trust_ours = trustworthiness(data, ours, n_neighbors=10)
trust_theirs = trustworthiness(data, theirs.astype(np.float64), n_neighbors=10)


def knn_accuracy(layout):
    return cross_val_score(KNeighborsClassifier(n_neighbors=10), layout, y[rows], cv=5).mean()


acc_ours, acc_theirs = knn_accuracy(ours), knn_accuracy(theirs)
print(f"{len(rows)} digits: trustworthiness (k = 10) scdino {trust_ours:.4f}, umap-learn {trust_theirs:.4f}; "
      f"10-NN accuracy of the classes in the layout scdino {acc_ours:.4f}, umap-learn {acc_theirs:.4f}; "
      f"scdino-eval {scdino_seconds:.1f} s (all of it), umap-learn {umap_learn_seconds:.1f} s (numba's "
      "compilation included)")
failures = []
if trust_ours < trust_theirs - 0.01:
    failures.append(f"FAIL: scdino's UMAP trustworthiness {trust_ours:.4f} is more than 0.01 below umap-learn's "
                    f"{trust_theirs:.4f}")
if acc_ours < acc_theirs - 0.03:
    failures.append(f"FAIL: scdino's UMAP keeps the classes apart less well: 10-NN accuracy {acc_ours:.4f}, "
                    f"umap-learn's {acc_theirs:.4f}")
for line in failures:
    print(line)
sys.exit(1 if failures else 0)
