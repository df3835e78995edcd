// Barnes-Hut t-SNE in the plane (van der Maaten 2014, "Accelerating t-SNE
// using tree-based algorithms") for whole evaluation sets: sparse input
// affinities from a k-nearest-neighbour graph, a quadtree for the repulsive
// forces, scikit-learn's optimisation schedule. Time O(n log n) and memory
// O(n k) per iteration; no n x n matrix. The result is a function of the
// graph, the options and the seed only: the same for every thread count.
// Thread-safety: BarnesHutTsne is reentrant; it runs its own worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "eval/neighbor_graph.h"

namespace scdino::eval {

/// Settings of BarnesHutTsne; the defaults are scikit-learn's (>= 1.2).
struct BarnesHutTsneOptions {
  /// Effective number of neighbours. Clamped to max(1, (n - 1) / 3) for small
  /// sets; the graph must then hold min(n - 1, floor(3 * perplexity + 1))
  /// neighbours per point (91 for the default).
  double perplexity = 30;
  /// Gradient steps in all, early exaggeration included (>= 0).
  int64_t iterations = 1000;
  /// Step size; 0 means scikit-learn's "auto": max(n / early_exaggeration / 4, 50).
  double learning_rate = 0;
  /// P is multiplied by this during the first exaggeration_iterations steps,
  /// which gathers clusters early and leaves room between them.
  double early_exaggeration = 12;
  int64_t exaggeration_iterations = 250;
  /// Barnes-Hut accuracy: a quadtree cell of side s at distance r from a
  /// point is summarised by its centre of mass when s / r < theta (as
  /// scikit-learn's angle). In [0, 1]; 0 is exact and O(n^2).
  double theta = 0.5;
  /// n x 2 row-major starting layout, e.g. the first two principal
  /// components of the input (scikit-learn's init="pca"). Empty: N(0, 1e-4^2)
  /// drawn from `seed`.
  std::vector<float> initial_layout;
  /// Rescales initial_layout so that its first column has standard
  /// deviation 1e-4, as scikit-learn does with its PCA initialisation, so
  /// raw principal component scores can be passed as they are.
  bool rescale_initial_layout = true;
  /// Seeds the random initial layout (unused with initial_layout).
  uint64_t seed = 0;
  /// Worker threads (>= 1). The output does not depend on it.
  int threads = 1;
  /// Polled at least once per iteration; returning true ends the run with
  /// Aborted within one iteration (tens of milliseconds at n = 20000).
  std::function<bool()> should_stop;
  /// Called after every iteration with (iterations done, iterations).
  std::function<void(int64_t, int64_t)> on_progress;
};

/// What BarnesHutTsne produced.
struct BarnesHutTsneResult {
  /// n x 2, row-major: point i is (y[2i], y[2i+1]).
  std::vector<float> y;
  /// KL(P || Q) of the final layout, with the Barnes-Hut estimate of the
  /// normalisation Z (scikit-learn reports the same quantity).
  double kl_divergence = 0;
  /// The perplexity and step size actually used (after clamping / "auto").
  double perplexity = 0;
  double learning_rate = 0;
  /// Neighbours per point used from the graph.
  int64_t neighbors = 0;
};

/// Barnes-Hut t-SNE of n points given their k-nearest-neighbour graph
/// (Euclidean distances, as NeighborGraph documents; only the first
/// min(n - 1, floor(3 * perplexity + 1)) neighbours of each row are used).
/// Conditional Gaussian affinities with a per-point bandwidth found by
/// binary search on the entropy (tolerance 1e-5), symmetrised and normalised
/// P; quadtree repulsion; exact attraction over the sparse P; gradient
/// descent with momentum 0.5 during early exaggeration and 0.8 after it,
/// delta-bar-delta gains (minimum 0.01), momentum and gains restarted when
/// the exaggeration ends, as scikit-learn does.
/// InvalidArgument for a malformed graph, a graph with too few neighbours,
/// a wrong-sized or non-finite initial layout, or an option out of range
/// (each named); Aborted when should_stop asked for it.
StatusOr<BarnesHutTsneResult> BarnesHutTsne(const NeighborGraph& graph, const BarnesHutTsneOptions& options = {});

}  // namespace scdino::eval
