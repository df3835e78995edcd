// Brute-force kNN by blocks of rows: each chunk owns its rows' results, so
// the output does not depend on the thread count. The worker pool and the
// generator live here because t-SNE, UMAP and trustworthiness all use them.
#include "eval/neighbor_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace scdino::eval {
namespace detail {

Status CheckRows(const std::string& who, const char* what, const std::vector<float>& x, int64_t n, int64_t d) {
  const std::string w = who + ": ";
  if (n < 2) return Status::InvalidArgument(w + "needs at least 2 points, got n = " + std::to_string(n));
  if (d < 1) return Status::InvalidArgument(w + what + " needs at least 1 column, got " + std::to_string(d));
  if (n > std::numeric_limits<int64_t>::max() / d || static_cast<uint64_t>(n * d) != x.size()) {
    return Status::InvalidArgument(w + what + " has " + std::to_string(x.size()) + " values, expected " +
                                   std::to_string(n) + " * " + std::to_string(d));
  }
  for (size_t e = 0; e < x.size(); ++e) {
    if (!std::isfinite(x[e])) {
      return Status::InvalidArgument(w + what + "[row " + std::to_string(e / d) + ", column " +
                                     std::to_string(e % d) + "] = " + FormatNumber(x[e]) + " is not finite");
    }
  }
  return Status::Ok();
}

// Independent lane sums: float additions may not be reordered by the
// compiler, so a single accumulator would be one serial dependency chain.
constexpr int kDistanceLanes = 8;

float SquaredDistanceF(const float* __restrict a, const float* __restrict b, int64_t d) {
  float s[kDistanceLanes] = {};
  int64_t c = 0;
  for (; c + kDistanceLanes <= d; c += kDistanceLanes) {
    for (int l = 0; l < kDistanceLanes; ++l) {
      const float t = a[c + l] - b[c + l];
      s[l] += t * t;
    }
  }
  for (; c < d; ++c) {
    const float t = a[c] - b[c];
    s[0] += t * t;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double SquaredDistanceD(const float* a, const float* b, int64_t d) {
  double s[4] = {};
  int64_t c = 0;
  for (; c + 4 <= d; c += 4) {
    for (int l = 0; l < 4; ++l) {
      const double t = double(a[c + l]) - double(b[c + l]);
      s[l] += t * t;
    }
  }
  for (; c < d; ++c) {
    const double t = double(a[c]) - double(b[c]);
    s[0] += t * t;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

double SplitMix64::Normal() {
  const double u1 = (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]: log(0) cannot happen
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) {
  SplitMix64 g(a);
  uint64_t h = g.Next() ^ b;
  SplitMix64 g2(h);
  h = g2.Next() ^ c;
  SplitMix64 g3(h);
  return g3.Next();
}

WorkerPool::WorkerPool(int threads) {
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { WorkLoop(t); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void WorkerPool::Drain(int worker) {
  for (;;) {
    int64_t c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_ || next_ >= chunks_) return;
      c = next_++;
    }
    bool go = false;
    try {
      go = (*job_)(c, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (!go) {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
  }
}

void WorkerPool::WorkLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
    }
    Drain(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_cv_.notify_all();
    }
  }
}

bool WorkerPool::Run(int64_t chunks, const std::function<bool(int64_t)>& fn) {
  return RunIndexed(chunks, [&fn](int64_t c, int) { return fn(c); });
}

bool WorkerPool::RunIndexed(int64_t chunks, const std::function<bool(int64_t, int)>& fn) {
  if (workers_.empty() || chunks <= 1) {
    // Waking the workers costs more than a lone chunk.
    for (int64_t c = 0; c < chunks; ++c) {
      if (!fn(c, 0)) return false;
    }
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    chunks_ = chunks;
    next_ = 0;
    stopped_ = false;
    error_ = nullptr;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  Drain(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
  return !stopped_;
}

}  // namespace detail

Status ValidateNeighborGraph(const NeighborGraph& g, const std::string& who) {
  const std::string w = who + ": neighbour graph ";
  if (g.n < 2) return Status::InvalidArgument(w + "needs at least 2 points, got n = " + std::to_string(g.n));
  if (g.k < 1 || g.k > g.n - 1) {
    return Status::InvalidArgument(w + "k = " + std::to_string(g.k) + " is outside [1, n - 1 = " +
                                   std::to_string(g.n - 1) + "]");
  }
  const uint64_t size = static_cast<uint64_t>(g.n) * static_cast<uint64_t>(g.k);
  if (g.indices.size() != size || g.distances.size() != size) {
    return Status::InvalidArgument(w + "has " + std::to_string(g.indices.size()) + " indices and " +
                                   std::to_string(g.distances.size()) + " distances, expected n * k = " +
                                   std::to_string(size) + " each");
  }
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t r = 0; r < g.k; ++r) {
      const int64_t j = g.indices[i * g.k + r];
      const float dist = g.distances[i * g.k + r];
      const std::string at = "[row " + std::to_string(i) + ", column " + std::to_string(r) + "]";
      if (j < 0 || j >= g.n || j == i) {
        return Status::InvalidArgument(w + "index" + at + " = " + std::to_string(j) + " is not in [0, n = " +
                                       std::to_string(g.n) + ") or is the point itself");
      }
      if (!std::isfinite(dist) || dist < 0) {
        return Status::InvalidArgument(w + "distance" + at + " = " + FormatNumber(dist) +
                                       " is not a finite value >= 0");
      }
      if (r > 0 && dist < g.distances[i * g.k + r - 1]) {
        return Status::InvalidArgument(w + "distance" + at + " = " + FormatNumber(dist) +
                                       " is smaller than its predecessor: rows must be sorted ascending");
      }
    }
  }
  return Status::Ok();
}

SparseGraph SymmetrizeNeighbors(const NeighborGraph& g, int64_t kuse, const std::vector<float>& v, Symmetrize how,
                                detail::WorkerPool& pool) {
  const int64_t n = g.n;
  // Row i gets its own kuse entries, then one for each edge pointing at it.
  std::vector<int64_t> start(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    start[i + 1] += kuse;
    for (int64_t r = 0; r < kuse; ++r) start[g.indices[i * g.k + r] + 1] += 1;
  }
  for (int64_t i = 0; i < n; ++i) start[i + 1] += start[i];
  std::vector<std::pair<int32_t, float>> raw(static_cast<size_t>(start[n]));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < kuse; ++r) {
      const int64_t j = g.indices[i * g.k + r];
      raw[fill[i]++] = {static_cast<int32_t>(j), v[i * kuse + r]};
      raw[fill[j]++] = {static_cast<int32_t>(i), v[i * kuse + r]};
    }
  }
  // Sorting a row brings the (at most two) entries of a column together;
  // both orders of a, b give the same float result.
  constexpr int64_t kRows = 256;
  std::vector<int64_t> merged(static_cast<size_t>(n));
  pool.Run((n + kRows - 1) / kRows, [&](int64_t c) {
    for (int64_t i = c * kRows; i < std::min(n, (c + 1) * kRows); ++i) {
      auto* b = raw.data() + start[i];
      auto* e = raw.data() + start[i + 1];
      std::sort(b, e);
      int64_t m = 0;
      for (auto* it = b; it != e; ++it) {
        if (m > 0 && b[m - 1].first == it->first) {
          const float x = b[m - 1].second, y = it->second;
          b[m - 1].second = how == Symmetrize::kSum ? x + y : x + y - x * y;
        } else {
          b[m++] = *it;
        }
      }
      merged[i] = m;
    }
    return true;
  });
  SparseGraph out;
  out.offsets.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) out.offsets[i + 1] = out.offsets[i] + merged[i];
  out.cols.resize(static_cast<size_t>(out.offsets[n]));
  out.vals.resize(static_cast<size_t>(out.offsets[n]));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t m = 0; m < merged[i]; ++m) {
      out.cols[out.offsets[i] + m] = raw[start[i] + m].first;
      out.vals[out.offsets[i] + m] = raw[start[i] + m].second;
    }
  }
  return out;
}

StatusOr<NeighborGraph> ExactKnn(const std::vector<float>& x, int64_t n, int64_t d, int64_t k,
                                 const ExactKnnOptions& o) {
  if (Status s = detail::CheckRows("ExactKnn", "x", x, n, d); !s.ok()) return s;
  if (k < 1 || k > n - 1) {
    return Status::InvalidArgument("ExactKnn: k = " + std::to_string(k) + " is outside [1, n - 1 = " +
                                   std::to_string(n - 1) + "]");
  }
  if (o.threads < 1) return Status::InvalidArgument("ExactKnn: threads must be >= 1, got " + std::to_string(o.threads));
  NeighborGraph g;
  g.n = n;
  g.k = k;
  g.indices.resize(static_cast<size_t>(n * k));
  g.distances.resize(static_cast<size_t>(n * k));
  // Rows in blocks and candidate columns in tiles, so that a tile of
  // columns stays in cache while the block's rows sweep over it.
  constexpr int64_t kRows = 16, kCols = 256;
  const int64_t blocks = (n + kRows - 1) / kRows;
  detail::WorkerPool pool(o.threads);
  const bool done = pool.Run(blocks, [&](int64_t b) {
    if (o.should_stop && o.should_stop()) return false;
    const int64_t r0 = b * kRows, r1 = std::min(n, r0 + kRows);
    // Per row, a max-heap on (distance, index) of the best k so far.
    std::vector<std::vector<std::pair<float, int64_t>>> heaps(static_cast<size_t>(r1 - r0));
    for (auto& h : heaps) h.reserve(static_cast<size_t>(k));
    for (int64_t c0 = 0; c0 < n; c0 += kCols) {
      const int64_t c1 = std::min(n, c0 + kCols);
      for (int64_t i = r0; i < r1; ++i) {
        auto& h = heaps[i - r0];
        const float* xi = x.data() + i * d;
        for (int64_t j = c0; j < c1; ++j) {
          if (j == i) continue;
          const std::pair<float, int64_t> cand(detail::SquaredDistanceF(xi, x.data() + j * d, d), j);
          if (static_cast<int64_t>(h.size()) < k) {
            h.push_back(cand);
            std::push_heap(h.begin(), h.end());
          } else if (cand < h.front()) {
            std::pop_heap(h.begin(), h.end());
            h.back() = cand;
            std::push_heap(h.begin(), h.end());
          }
        }
      }
    }
    for (int64_t i = r0; i < r1; ++i) {
      auto& h = heaps[i - r0];
      std::vector<std::pair<double, int64_t>> best;
      best.reserve(h.size());
      for (const auto& [unused, j] : h) {
        best.emplace_back(std::sqrt(detail::SquaredDistanceD(x.data() + i * d, x.data() + j * d, d)), j);
      }
      // Re-sorted on the double distances so that rows are ascending as the
      // graph requires, even where float rounding had swapped two.
      std::sort(best.begin(), best.end());
      for (int64_t r = 0; r < k; ++r) {
        g.indices[i * k + r] = best[r].second;
        g.distances[i * k + r] = static_cast<float>(best[r].first);
      }
    }
    return true;
  });
  if (!done) return Status::Aborted("ExactKnn: stopped on request");
  return g;
}

}  // namespace scdino::eval
