#!/usr/bin/env python3
"""embeddings.h5ad as scanpy users read it: scdino-eval on scikit-learn's
digits (digits_features.py, 1,348 test rows), then the file loaded with
anndata and checked for what scanpy's pp.neighbors and pp.pca leave
(obsp['distances'] and obsp['connectivities'] as sparse n x n matrices,
uns['neighbors'] naming them with n_neighbors and the method,
uns['pca']['variance_ratio']). Then Debian's leidenalg clusters the graph
of obsp['connectivities'] as it is: the partition must agree with the
digit classes (adjusted Rand index at least 0.5; the classes of these
pixel features are well apart, and an empty or identity graph scores 0).
Lines starting with FAIL: fail the test.

    h5ad_neighbors_test.py SCDINO_EVAL WORK_DIR
"""
import os
import sys

import anndata
import igraph
import leidenalg
import numpy as np
import scipy.sparse
from sklearn.metrics import adjusted_rand_score

from digits_features import run_eval, write_digits

scdino_eval, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
features, config, x, y, _, test = write_digits(work, 0.75, "{tsne: false, umap: true, linear_probe: false, kmeans: false}")
out, _ = run_eval(scdino_eval, work, config, features)
adata = anndata.read_h5ad(os.path.join(out, "embeddings.h5ad"))
n = adata.n_obs
failures = []


def fail(why):
    failures.append(why)
    print("FAIL: " + why)


for key in ("distances", "connectivities"):
    if key not in adata.obsp:
        fail(f"no obsp['{key}']")
    elif not scipy.sparse.issparse(adata.obsp[key]) or adata.obsp[key].shape != (n, n):
        fail(f"obsp['{key}'] is not a sparse {n} x {n} matrix: {type(adata.obsp[key])}")
neighbors = adata.uns.get("neighbors", {})
if neighbors.get("connectivities_key") != "connectivities" or neighbors.get("distances_key") != "distances":
    fail(f"uns['neighbors'] does not name the obsp keys: {neighbors}")
params = neighbors.get("params", {})
if params.get("method") != "umap" or int(params.get("n_neighbors", 0)) != 30:
    fail(f"uns['neighbors']['params'] does not say method umap, n_neighbors 30: {params}")
ratio = np.asarray(adata.uns.get("pca", {}).get("variance_ratio", []))
if ratio.shape != (2,) or not (0 < ratio[1] <= ratio[0] < 1):
    fail(f"uns['pca']['variance_ratio'] is not two decreasing fractions: {ratio}")
if failures:
    sys.exit(1)

distances = adata.obsp["distances"].tocsr()
per_row = np.diff(distances.indptr)
if not (per_row == 29).all():
    fail(f"obsp['distances'] rows hold {per_row.min()}..{per_row.max()} neighbours, expected 29 (n_neighbors - 1)")
rows = np.array([int(name) for name in adata.obs_names])
# The distances are the features' Euclidean distances.
i = 0
j = distances.indices[distances.indptr[0]]
expected = np.linalg.norm(x[rows[i]] - x[rows[j]])
if abs(distances[i, j] - expected) > 1e-4:
    fail(f"obsp['distances'][0, {j}] = {distances[i, j]}, the features' distance is {expected}")

conn = adata.obsp["connectivities"].tocsr()
if abs(conn - conn.T).max() > 1e-6:
    fail("obsp['connectivities'] is not symmetric")
if conn.nnz == 0 or conn.max() > 1.0 + 1e-6 or conn.min() < 0:
    fail(f"obsp['connectivities'] holds {conn.nnz} values in [{conn.min()}, {conn.max()}], expected memberships in (0, 1]")
upper = scipy.sparse.triu(conn, k=1).tocoo()
graph = igraph.Graph(n=n, edges=list(zip(upper.row.tolist(), upper.col.tolist())), edge_attrs={"weight": upper.data})
partition = leidenalg.find_partition(graph, leidenalg.RBConfigurationVertexPartition, weights="weight", seed=0)
labels = np.array(partition.membership)
ari = adjusted_rand_score(y[rows], labels)
print(f"leidenalg on obsp['connectivities'] ({conn.nnz} values, {n} rows): {len(set(labels))} clusters, "
      f"ARI with the digit classes {ari:.3f}")
if ari < 0.5:
    fail(f"the Leiden partition of obsp['connectivities'] agrees with the classes at ARI {ari:.3f} < 0.5")
sys.exit(1 if failures else 0)
