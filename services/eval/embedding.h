// The linear two-dimensional view of feature rows (PCA) for the evaluation
// figures and the t-SNE start; t-SNE and UMAP are eval/tsne.h and
// eval/umap.h. Plain C++ over row-major float arrays, deterministic, so a
// figure can be regenerated bit for bit from the same features. Reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

/// n points in the plane.
struct Embedding2D {
  /// n x 2, row-major: point i is (xy[2i], xy[2i+1]).
  std::vector<float> xy;
  /// Fraction of the total variance along each axis.
  std::array<double, 2> explained_variance_ratio{0.0, 0.0};
};

/// Projects the rows of `x` (n x d, row-major) onto their first two principal
/// components, after centring. The sign of each component is fixed so that
/// its largest-magnitude loading is positive, so equal inputs give equal
/// figures whatever the eigen solver returns. With d == 1 the second
/// coordinate is 0. Points with zero total variance map to the origin with
/// ratios 0. Meant for whole evaluation sets: `x` is not copied (extra
/// memory O(d^2) when n >= d), 10^5 x 768 takes a few seconds.
/// InvalidArgument when n < 2, d < 1, x.size() != n * d, or a value is not
/// finite (the message names row and column).
StatusOr<Embedding2D> Pca2(const std::vector<float>& x, int64_t n, int64_t d);

}  // namespace scdino::eval
