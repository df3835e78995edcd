// Trustworthiness by tiles. Only ranks matter, and the rank of an
// embedding neighbour j of i is 1 + #{l : D(i, l) < D(i, j)}: so each tile
// of original-space distances is compared against the k thresholds D(i, j)
// of its rows and forgotten. A tile serves both its row block and (by
// symmetry) its column block, halving the O(n^2 d) work. Counts are
// integers kept per thread and added at the end, so the result does not
// depend on the thread count or the order in which tiles run.
#include "eval/trustworthiness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "eval/neighbor_graph.h"

namespace scdino::eval {
namespace {

constexpr int64_t kBlock = 64;  // tile side: 64 rows of 384 floats stay in L2

struct Problem {
  const float* x;
  int64_t n, d, k;
  std::vector<int64_t> nbr;   // n x k embedding neighbours, nearest first
  std::vector<double> thr;    // n x k: D(i, nbr) squared, in double
  std::vector<float> limit;   // per row: above this no threshold can be met
  double band;                // relative error bound of the float distances
};

// Exact k nearest neighbours in the embedding (double, ties: lower index).
// False when stop() asked to end.
bool EmbeddingNeighbors(const std::vector<float>& e, int64_t n, int64_t m, int64_t k, detail::WorkerPool& pool,
                        const std::function<bool()>& stop, std::vector<int64_t>* nbr) {
  nbr->resize(static_cast<size_t>(n * k));
  return pool.Run((n + kBlock - 1) / kBlock, [&](int64_t c) {
    if (stop && stop()) return false;
    std::vector<std::pair<double, int64_t>> heap;
    for (int64_t i = c * kBlock; i < std::min(n, (c + 1) * kBlock); ++i) {
      heap.clear();
      for (int64_t l = 0; l < n; ++l) {
        if (l == i) continue;
        double s = 0;
        for (int64_t a = 0; a < m; ++a) {
          const double t = double(e[i * m + a]) - e[l * m + a];
          s += t * t;
        }
        const std::pair<double, int64_t> cand(s, l);
        if (static_cast<int64_t>(heap.size()) < k) {
          heap.push_back(cand);
          std::push_heap(heap.begin(), heap.end());
        } else if (cand < heap.front()) {
          std::pop_heap(heap.begin(), heap.end());
          heap.back() = cand;
          std::push_heap(heap.begin(), heap.end());
        }
      }
      std::sort_heap(heap.begin(), heap.end());
      for (int64_t r = 0; r < k; ++r) (*nbr)[i * k + r] = heap[r].second;
    }
    return true;
  });
}

// Adds to cnt[r] (row i's counts) every candidate l that ranks before
// nbr[i][r]; df[t] is the float distance from i to the candidate cand0 + t.
void CountRow(const Problem& p, int64_t i, const float* df, int64_t stride, int64_t cand0, int64_t cands,
              int32_t* cnt) {
  const float lim = p.limit[i];
  const double* thr = p.thr.data() + i * p.k;
  const int64_t* nbr = p.nbr.data() + i * p.k;
  for (int64_t t = 0; t < cands; ++t) {
    const float v = df[t * stride];
    const int64_t l = cand0 + t;
    if (v > lim || l == i) continue;
    double exact = -1;  // computed on demand, for near-ties only
    for (int64_t r = 0; r < p.k; ++r) {
      if (v < thr[r] * (1 - p.band)) {
        ++cnt[r];
      } else if (v <= thr[r] * (1 + p.band)) {
        if (exact < 0) exact = detail::SquaredDistanceD(p.x + i * p.d, p.x + l * p.d, p.d);
        if (exact < thr[r] || (exact == thr[r] && l < nbr[r])) ++cnt[r];
      }
    }
  }
}

}  // namespace

StatusOr<double> Trustworthiness(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& embedding,
                                 int64_t m, const TrustworthinessOptions& o) {
  if (Status s = detail::CheckRows("Trustworthiness", "x", x, n, d); !s.ok()) return s;
  if (Status s = detail::CheckRows("Trustworthiness", "embedding", embedding, n, m); !s.ok()) return s;
  if (o.k < 1 || 2 * o.k >= n) {
    return Status::InvalidArgument("Trustworthiness: k = " + std::to_string(o.k) + " must be in [1, n / 2) for n = " +
                                   std::to_string(n));
  }
  if (o.threads < 1) {
    return Status::InvalidArgument("Trustworthiness: threads must be >= 1, got " + std::to_string(o.threads));
  }
  const int64_t k = o.k;
  detail::WorkerPool pool(o.threads);
  Problem p;
  p.x = x.data();
  p.n = n;
  p.d = d;
  p.k = k;
  // Twice the bound on SquaredDistanceF's relative error.
  p.band = static_cast<double>(d + 16) * 0x1.0p-23;
  if (!EmbeddingNeighbors(embedding, n, m, k, pool, o.should_stop, &p.nbr)) {
    return Status::Aborted("Trustworthiness: stopped on request");
  }
  p.thr.resize(static_cast<size_t>(n * k));
  p.limit.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double top = 0;
    for (int64_t r = 0; r < k; ++r) {
      p.thr[i * k + r] = detail::SquaredDistanceD(x.data() + i * d, x.data() + p.nbr[i * k + r] * d, d);
      top = std::max(top, p.thr[i * k + r]);
    }
    p.limit[i] = static_cast<float>(std::min<double>(top * (1 + 2 * p.band), std::numeric_limits<float>::max()));
  }

  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::pair<int64_t, int64_t>> tiles;
  for (int64_t bi = 0; bi < blocks; ++bi)
    for (int64_t bj = bi; bj < blocks; ++bj) tiles.emplace_back(bi, bj);
  std::vector<std::vector<int32_t>> counts(static_cast<size_t>(pool.threads()),
                                           std::vector<int32_t>(static_cast<size_t>(n * k), 0));
  std::mutex progress_mu;
  int64_t tiles_done = 0;
  const bool done = pool.RunIndexed(static_cast<int64_t>(tiles.size()), [&](int64_t t, int worker) {
    if (o.should_stop && o.should_stop()) return false;

    const int64_t r0 = tiles[t].first * kBlock, r1 = std::min(n, r0 + kBlock);
    const int64_t c0 = tiles[t].second * kBlock, c1 = std::min(n, c0 + kBlock);
    const bool diagonal = r0 == c0;
    float tile[kBlock * kBlock];
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t l = diagonal ? i + 1 : c0; l < c1; ++l) {
        const float v = detail::SquaredDistanceF(x.data() + i * d, x.data() + l * d, d);
        tile[(i - r0) * kBlock + (l - c0)] = v;
        if (diagonal) tile[(l - c0) * kBlock + (i - r0)] = v;
      }
      if (diagonal) tile[(i - r0) * kBlock + (i - c0)] = 0;  // skipped by CountRow
    }
    int32_t* cnt = counts[worker].data();
    for (int64_t i = r0; i < r1; ++i) CountRow(p, i, tile + (i - r0) * kBlock, 1, c0, c1 - c0, cnt + i * k);
    if (!diagonal) {
      for (int64_t l = c0; l < c1; ++l) CountRow(p, l, tile + (l - c0), kBlock, r0, r1 - r0, cnt + l * k);
    }
    if (o.on_progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      o.on_progress(++tiles_done, static_cast<int64_t>(tiles.size()));
    }
    return true;
  });
  if (!done) return Status::Aborted("Trustworthiness: stopped on request");
  double penalty = 0;
  for (int64_t e = 0; e < n * k; ++e) {
    int64_t rank = 1;
    for (const auto& c : counts) rank += c[e];
    penalty += static_cast<double>(std::max<int64_t>(0, rank - k));
  }
  const double nn = static_cast<double>(n), kk = static_cast<double>(k);
  return 1.0 - penalty * (2.0 / (nn * kk * (2.0 * nn - 3.0 * kk - 1.0)));
}

}  // namespace scdino::eval
