// Clustering of frozen features as single-cell users score it: k-means
// (greedy k-means++ seeding, several restarts, the lowest inertia kept) and the
// agreement of its clusters with the known classes: adjusted Rand index
// (Hubert & Arabie 1985) and normalised mutual information (arithmetic
// mean of the entropies, scikit-learn's default).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

struct KMeansOptions {
  int64_t restarts = 10;
  int64_t max_iterations = 300;
  uint64_t seed = 0;
  /// Asked between restarts: true ends with Aborted.
  std::function<bool()> should_stop;
  /// Called after each restart with (restarts done, restarts).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct KMeansResult {
  std::vector<int64_t> assignment;  ///< cluster of each row
  double inertia = 0;               ///< sum of squared distances to the centres
};

/// k clusters of the rows of x [n, d]; InvalidArgument when k is not in [1, n].
StatusOr<KMeansResult> KMeans(const torch::Tensor& x, int64_t k, const KMeansOptions& options);

/// Agreement of two labelings of the same rows (any integer labels).
double AdjustedRandIndex(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
double NormalizedMutualInformation(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace scdino::eval
