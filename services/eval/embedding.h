// Two-dimensional embeddings of feature rows (PCA and exact t-SNE) for the
// evaluation figures: they show at a glance whether DINO features separate the
// cell classes. Plain C++ over row-major float arrays so that the evaluation
// tools do not need LibTorch for them; both are deterministic, so a figure
// can be regenerated bit for bit from the same features.
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
  /// Fraction of the total variance along each axis (PCA); 0 for t-SNE,
  /// whose axes carry no variance meaning.
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

/// Exact t-SNE (van der Maaten & Hinton 2008) settings; the defaults are
/// scikit-learn's classic ones.
struct TsneOptions {
  /// Effective number of neighbours. Clamped to max(1, (n - 1) / 3) so that
  /// small sets still get a well-posed bandwidth search (as scikit-learn).
  double perplexity = 30;
  /// Gradient steps in all, early exaggeration included.
  int64_t iterations = 1000;
  double learning_rate = 200;
  /// P is multiplied by this during the first exaggeration_iterations steps,
  /// which pulls clusters together early and leaves room between them.
  double early_exaggeration = 12;
  int64_t exaggeration_iterations = 250;
  /// Seeds the initial layout; the same seed and input give the same output
  /// bit for bit on one build.
  uint64_t seed = 0;
};

/// Exact t-SNE of the rows of `x` (n x d, row-major): Gaussian affinities
/// with a per-point bandwidth found by binary search to match the
/// perplexity, symmetrised P, Student-t Q, gradient descent with momentum
/// 0.5 (during exaggeration) then 0.8, delta-bar-delta gains (minimum 0.01),
/// initial layout N(0, sd 1e-4) drawn from std::mt19937_64(seed) through our
/// own Box-Muller (std::normal_distribution differs between standard
/// libraries). O(n^2) time per iteration and O(n^2) memory (4 n^2 bytes);
/// meant for n up to a few thousand (n = 2000, 1000 iterations: seconds);
/// n > 10000 is refused (subsample first). Single-threaded. InvalidArgument
/// when n < 2, d < 1, x.size() != n * d, a value is not finite, or an option
/// is out of range (named).
StatusOr<Embedding2D> Tsne(const std::vector<float>& x, int64_t n, int64_t d, const TsneOptions& o = {});

}  // namespace scdino::eval
