#include "eval/tsne_affinities.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace scdino::eval::detail {

namespace {

// p_{j|i} for one row of k neighbour distances: the Gaussian bandwidth is
// found by bisection on the precision beta so that the entropy (in nats)
// matches log(perplexity). Distances are shifted by the nearest one so that
// exp() cannot underflow to an all-zero row; normalised, the shift cancels.
void ConditionalRow(const float* dist, int64_t k, double perplexity, double* d2, double* p) {
  double mean = 0;
  const double d0 = double(dist[0]) * dist[0];
  for (int64_t r = 0; r < k; ++r) {
    d2[r] = double(dist[r]) * dist[r] - d0;
    mean += d2[r];
  }
  mean /= static_cast<double>(k);
  const double target = std::log(perplexity);
  double beta = mean > 0 ? 1.0 / mean : 1.0, lo = 0.0, hi = std::numeric_limits<double>::infinity();
  double sum = 1;
  for (int step = 0; step < 200; ++step) {
    sum = 0;
    double dp = 0;
    for (int64_t r = 0; r < k; ++r) {
      p[r] = std::exp(-beta * d2[r]);
      sum += p[r];
      dp += d2[r] * p[r];
    }
    const double entropy = std::log(sum) + beta * dp / sum;  // sum >= 1: p[0] == 1
    const double diff = entropy - target;
    if (std::abs(diff) < 1e-5) break;
    if (diff > 0) {  // too flat: sharpen
      lo = beta;
      beta = std::isinf(hi) ? beta * 2 : (beta + hi) / 2;
    } else {
      hi = beta;
      beta = (beta + lo) / 2;
    }
  }
  for (int64_t r = 0; r < k; ++r) p[r] /= sum;
}

}  // namespace

SparseP JointProbabilities(const NeighborGraph& g, int64_t kuse, double perplexity, WorkerPool& pool,
                           const std::function<bool()>& stop, bool* aborted) {
  const int64_t n = g.n;
  std::vector<float> cond(static_cast<size_t>(n * kuse));
  *aborted = !pool.Run((n + kChunk - 1) / kChunk, [&](int64_t c) {
    if (stop && stop()) return false;
    std::vector<double> d2(static_cast<size_t>(kuse)), p(static_cast<size_t>(kuse));
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
      ConditionalRow(g.distances.data() + i * g.k, kuse, perplexity, d2.data(), p.data());
      for (int64_t r = 0; r < kuse; ++r) cond[i * kuse + r] = static_cast<float>(p[r]);
    }
    return true;
  });
  SparseP P;
  if (*aborted) return P;
  const SparseGraph sym = SymmetrizeNeighbors(g, kuse, cond, Symmetrize::kSum, pool);
  double total = 0;
  for (float v : sym.vals) total += v;
  P.offsets.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    P.offsets[i + 1] = P.offsets[i] + (sym.offsets[i + 1] - sym.offsets[i] + kLanes - 1) / kLanes * kLanes;
  }
  P.cols.resize(static_cast<size_t>(P.offsets[n]));
  P.vals.resize(static_cast<size_t>(P.offsets[n]));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = P.offsets[i], s = sym.offsets[i]; e < P.offsets[i + 1]; ++e, ++s) {
      const bool real = s < sym.offsets[i + 1];
      P.cols[e] = real ? sym.cols[s] : static_cast<int32_t>(i);
      P.vals[e] = real ? static_cast<float>(sym.vals[s] / total) : 0.0f;
    }
  }
  return P;
}


}  // namespace scdino::eval::detail
