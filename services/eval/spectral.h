// Spectral layout of a sparse weighted graph, UMAP's initialisation: the
// leading non-trivial eigenvectors of the normalised adjacency
// D^-1/2 W D^-1/2 (the eigenvectors of the smallest eigenvalues of the
// normalised Laplacian), found per connected component by Spectra's
// implicitly restarted Lanczos (the method of ARPACK, which UMAP's own
// initialisation calls through scipy), one eigenvector per run with the
// ones found projected out (so that degenerate pairs come out whole).
// Memory O(nnz + 50 n); no dense n x n matrix.
// Thread-safety: the functions are reentrant; the pool is the caller's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "eval/neighbor_graph.h"

namespace scdino::eval {

/// Labels the connected components (0, 1, ... in order of their smallest
/// point) and returns their count.
int64_t ConnectedComponents(const SparseGraph& w, std::vector<int32_t>* label);

/// Settings of SpectralLayout.
struct SpectralOptions {
  /// Coordinates per point (the embedding dimension).
  int64_t dim = 2;
  /// Seeds the Lanczos start vectors and the placement of tiny components.
  uint64_t seed = 0;
  /// A Ritz pair counts as converged when |M x - theta x| <= tolerance
  /// (M has norm 1), as UMAP's eigen solver tolerance.
  double tolerance = 1e-4;
  /// Operator applications allowed per eigenvector before giving up
  /// (whole restarts of the Lanczos basis: about this many).
  int64_t max_matvecs = 3000;
  /// Polled at every operator application.
  std::function<bool()> should_stop;
  /// Eigenvectors found of those the layout needs (dim per component large
  /// enough to solve), after each.
  std::function<void(int64_t, int64_t)> on_progress;
};

/// What SpectralLayout produced.
struct SpectralResult {
  /// n x dim, row-major; empty when not converged.
  std::vector<double> layout;
  /// False when the solver did not converge on some component; `note` says
  /// which and how far it got.
  bool converged = false;
  /// Connected components of w.
  int64_t components = 0;
  /// Describes what was done beyond the plain case (several components,
  /// non-convergence), for the caller's log; empty otherwise.
  std::string note;
};

/// The leading `dim` non-trivial eigenvectors of the normalised adjacency of
/// every component of w with more than 2 (dim + 1) points (sign fixed so
/// that the largest-magnitude entry is positive), in descending eigenvalue
/// order; a single component keeps them unscaled. With several components
/// each is scaled into a cell of a square grid, largest component first
/// (the placement carries no meaning: UMAP's own places components by their
/// data centroids, which this function does not see); components too small
/// for the solver get random coordinates in their cell. The result depends on (w, options) only, not on the pool's
/// thread count. Aborted when should_stop asked for it.
StatusOr<SpectralResult> SpectralLayout(const SparseGraph& w, const SpectralOptions& options,
                                        detail::WorkerPool& pool);

}  // namespace scdino::eval
