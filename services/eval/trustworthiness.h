// Trustworthiness T(k) of an embedding (Venna & Kaski 2001), the quality
// figure reported next to every t-SNE and UMAP plot: how far the embedding's
// k nearest neighbours of each point are, in rank, from its k nearest in the
// original space. Same definition and ranking as
// sklearn.manifold.trustworthiness (euclidean), computed exactly without an
// n x n matrix: the original-space distances are formed tile by tile and
// only turned into rank counts.
// Thread-safety: Trustworthiness is reentrant; it runs its own worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

/// Settings of Trustworthiness.
struct TrustworthinessOptions {
  /// Neighbours compared per point; 1 <= k < n / 2 (sklearn's bound).
  int64_t k = 10;
  /// Worker threads (>= 1); the result does not depend on it.
  int threads = 1;
  /// Polled between row blocks and tiles (milliseconds apart); true ends the
  /// computation with Aborted.
  std::function<bool()> should_stop;
  /// Tiles of the pairwise pass done of all, from the worker threads (one
  /// call at a time).
  std::function<void(int64_t, int64_t)> on_progress;
};

/// T(k) = 1 - 2 / (n k (2n - 3k - 1)) * sum_i sum_{j in E_k(i)} max(0, r(i, j) - k),
/// where E_k(i) are the k nearest neighbours of point i in the embedding and
/// r(i, j) is the rank of j among the other points ordered by their
/// original-space distance to i (1 = nearest). x: the original rows (n x d,
/// row-major), embedding: n x m. Distances are Euclidean and decided in
/// double precision (a single-precision pass settles all but near-ties);
/// ties rank the lower index first. This is sklearn's value for the arrays
/// cast to float64 (given float32 arrays, sklearn rounds the distances to
/// float32 first, which reorders near-ties: a few 1e-6 at n = 300). Time O(n^2 (d + m)), memory O(n k)
/// besides the inputs: n = 20000, d = 384 takes about 9 s on 2 threads
/// (12 s of CPU: n^2 / 2 pairs of 384-float rows, each pair once).
/// InvalidArgument when the shapes disagree, a value is not finite, or an
/// option is out of range (named); Aborted when should_stop asked for it.
StatusOr<double> Trustworthiness(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& embedding,
                                 int64_t m, const TrustworthinessOptions& options = {});

}  // namespace scdino::eval
