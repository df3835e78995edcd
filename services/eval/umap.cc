// UMAP, written from the paper. The graph is kept in compressed rows with
// both directions of every edge: each point owns its row (the unit of work
// in the layout epochs), and the pull an edge (i, j) exerts on j is written
// into the slot of the reverse edge (j, i), where j's own row collects it.
#include "eval/umap.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "eval/spectral.h"

namespace scdino::eval {
namespace {


constexpr int64_t kPointsPerChunk = 256;  // points per work chunk

// Per point: rho, the distance to the nearest neighbour, and sigma, found by
// bisection so that sum_j exp(-(d_j - rho) / sigma) = log2(n_neighbors);
// the memberships exp(-(d_j - rho) / sigma) then go into row i of W.
void SmoothKnnRow(const float* dist, int64_t kuse, double target, double mean_all, float* w) {
  double rho = 0, mean = 0;
  for (int64_t r = 0; r < kuse; ++r) {
    mean += dist[r];
    if (rho == 0 && dist[r] > 0) rho = dist[r];
  }
  mean /= static_cast<double>(kuse);
  double lo = 0, hi = std::numeric_limits<double>::infinity(), sigma = 1;
  for (int step = 0; step < 64; ++step) {
    double psum = 0;
    for (int64_t r = 0; r < kuse; ++r) {
      const double d = dist[r] - rho;
      psum += d > 0 ? std::exp(-d / sigma) : 1.0;
    }
    if (std::abs(psum - target) < 1e-5) break;
    if (psum > target) {
      hi = sigma;
      sigma = (lo + hi) / 2;
    } else {
      lo = sigma;
      sigma = std::isinf(hi) ? sigma * 2 : (lo + hi) / 2;
    }
  }
  // A floor keeps sigma away from 0 where all neighbours sit at rho.
  sigma = std::max(sigma, 1e-3 * (rho > 0 ? mean : mean_all));
  for (int64_t r = 0; r < kuse; ++r) {
    const double d = dist[r] - rho;
    w[r] = static_cast<float>(d > 0 ? std::exp(-d / sigma) : 1.0);
  }
}

// Fuzzy union W + W^T - W o W^T of the smooth-kNN memberships of each
// point's first kuse neighbours.
SparseGraph FuzzyUnion(const NeighborGraph& g, int64_t kuse, double target, detail::WorkerPool& pool) {
  const int64_t n = g.n;
  double mean_all = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < kuse; ++r) mean_all += g.distances[i * g.k + r];
  mean_all /= static_cast<double>(n * kuse);
  std::vector<float> w(static_cast<size_t>(n * kuse));
  pool.Run((n + kPointsPerChunk - 1) / kPointsPerChunk, [&](int64_t c) {
    for (int64_t i = c * kPointsPerChunk; i < std::min(n, (c + 1) * kPointsPerChunk); ++i) {
      SmoothKnnRow(g.distances.data() + i * g.k, kuse, target, mean_all, w.data() + i * kuse);
    }
    return true;
  });
  return SymmetrizeNeighbors(g, kuse, w, Symmetrize::kFuzzyUnion, pool);
}

// The fuzzy union with edges below max / epochs removed (they would never
// be sampled).
SparseGraph FuzzyGraph(const NeighborGraph& g, int64_t kuse, double target, int64_t epochs, detail::WorkerPool& pool) {
  const int64_t n = g.n;
  const SparseGraph sym = FuzzyUnion(g, kuse, target, pool);
  float wmax = 0;
  for (float v : sym.vals) wmax = std::max(wmax, v);
  const float cut = wmax / static_cast<float>(epochs);
  SparseGraph out;
  out.offsets.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = sym.offsets[i]; e < sym.offsets[i + 1]; ++e) {
      if (sym.vals[e] < cut || sym.vals[e] <= 0) continue;
      out.cols.push_back(sym.cols[e]);
      out.vals.push_back(sym.vals[e]);
    }
    out.offsets[i + 1] = static_cast<int64_t>(out.cols.size());
  }
  return out;
}


// One epoch's work for point i: its due edges pull it towards their other
// end (read from `snap`, the epoch-start layout) and record the opposite
// pull at the reverse edge; each due edge brings its negative samples.
template <int kDim>
void PointEpoch(int64_t i, int64_t epoch, int64_t dim_rt, const SparseGraph& w, const std::vector<int64_t>& rev,
                const float* snap, float* yi, float* pull, double* next, double* next_neg, const double* eps,
                const double* eps_neg, float a, float b, float gamma2b, float alpha, detail::SplitMix64& rng) {
  const int64_t dim = kDim > 0 ? kDim : dim_rt, n = w.n();
  auto clip = [](float v) { return std::max(-4.0f, std::min(4.0f, v)); };
  for (int64_t e = w.offsets[i]; e < w.offsets[i + 1]; ++e) {
    if (next[e] > epoch) continue;
    const float* yj = snap + int64_t{w.cols[e]} * dim;
    float d2 = 0;
    for (int64_t k = 0; k < dim; ++k) d2 += (yi[k] - yj[k]) * (yi[k] - yj[k]);
    float coef = 0;
    if (d2 > 0) {
      const float pb = std::exp(b * std::log(d2));  // d2^b
      coef = -2 * a * b * (pb / d2) / (1 + a * pb);
    }
    float* pe = pull + rev[e] * dim;
    for (int64_t k = 0; k < dim; ++k) {
      const float step = clip(coef * (yi[k] - yj[k])) * alpha;
      yi[k] += step;
      pe[k] = -step;
    }
    next[e] += eps[e];
    const int64_t negatives = static_cast<int64_t>((epoch - next_neg[e]) / eps_neg[e]);
    for (int64_t s = 0; s < negatives; ++s) {
      const int64_t q = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(n)));
      if (q == i) continue;
      const float* yq = snap + q * dim;
      float dq = 0;
      for (int64_t k = 0; k < dim; ++k) dq += (yi[k] - yq[k]) * (yi[k] - yq[k]);
      if (!(dq > 0)) continue;  // coincident: no direction to push along
      const float rc = gamma2b / ((0.001f + dq) * (1 + a * std::exp(b * std::log(dq))));
      for (int64_t k = 0; k < dim; ++k) yi[k] += clip(rc * (yi[k] - yq[k])) * alpha;
    }
    next_neg[e] += static_cast<double>(negatives) * eps_neg[e];
  }
}

// The stochastic layout optimisation. Directed edge e = (i, j) is due every
// epochs_per_sample[e] = max(w) / w_e epochs and then brings negative
// samples at negative_sample_rate times that frequency; the step decays
// linearly from learning_rate to 0.
Status OptimizeLayout(const SparseGraph& w, const UmapResult& out, const UmapOptions& o, detail::WorkerPool& pool,
                      std::vector<float>* y) {
  const int64_t n = w.n(), dim = o.n_components, ne = static_cast<int64_t>(w.cols.size());
  float wmax = 0;
  for (float v : w.vals) wmax = std::max(wmax, v);
  std::vector<double> eps(ne), next(ne), eps_neg(ne), next_neg(ne);
  for (int64_t e = 0; e < ne; ++e) {
    eps[e] = wmax / w.vals[e];
    next[e] = eps[e];
    eps_neg[e] = o.negative_sample_rate > 0 ? eps[e] / o.negative_sample_rate : std::numeric_limits<double>::infinity();
    next_neg[e] = eps_neg[e];
  }
  // rev[e]: the position of (j, i) in row j (rows are sorted by column and
  // the graph is symmetric).
  std::vector<int64_t> rev(ne);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = w.offsets[i]; e < w.offsets[i + 1]; ++e) {
      const int32_t* row = w.cols.data() + w.offsets[w.cols[e]];
      const int32_t* end = w.cols.data() + w.offsets[w.cols[e] + 1];
      rev[e] = std::lower_bound(row, end, static_cast<int32_t>(i)) - w.cols.data();
    }
  }
  std::vector<float>& cur = *y;
  std::vector<float> snap(cur.size()), pull(static_cast<size_t>(ne * dim), 0.0f);
  const float a = static_cast<float>(out.a), b = static_cast<float>(out.b);
  const float gamma2b = static_cast<float>(2 * o.repulsion_strength * out.b);
  for (int64_t epoch = 0; epoch < out.epochs; ++epoch) {
    if (o.should_stop && o.should_stop()) {
      return Status::Aborted("Umap: stopped on request at epoch " + std::to_string(epoch));
    }
    const float alpha = static_cast<float>(o.learning_rate * (1.0 - double(epoch) / out.epochs));
    std::copy(cur.begin(), cur.end(), snap.begin());
    pool.Run((n + kPointsPerChunk - 1) / kPointsPerChunk, [&](int64_t c) {
      for (int64_t i = c * kPointsPerChunk; i < std::min(n, (c + 1) * kPointsPerChunk); ++i) {
        detail::SplitMix64 rng(detail::MixSeed(o.seed, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(i)));
        float* yi = cur.data() + i * dim;
        if (dim == 2) {
          PointEpoch<2>(i, epoch, dim, w, rev, snap.data(), yi, pull.data(), next.data(), next_neg.data(), eps.data(),
                        eps_neg.data(), a, b, gamma2b, alpha, rng);
        } else {
          PointEpoch<0>(i, epoch, dim, w, rev, snap.data(), yi, pull.data(), next.data(), next_neg.data(), eps.data(),
                        eps_neg.data(), a, b, gamma2b, alpha, rng);
        }
      }
      return true;
    });
    // Point j takes the pulls recorded in its own row, in row order, and
    // clears them for the next epoch.
    pool.Run((n + kPointsPerChunk - 1) / kPointsPerChunk, [&](int64_t c) {
      for (int64_t j = c * kPointsPerChunk; j < std::min(n, (c + 1) * kPointsPerChunk); ++j) {
        for (int64_t e = w.offsets[j] * dim; e < w.offsets[j + 1] * dim; e += dim) {
          for (int64_t k = 0; k < dim; ++k) {
            cur[j * dim + k] += pull[e + k];
            pull[e + k] = 0;
          }
        }
      }
      return true;
    });
    if (o.on_progress) o.on_progress(epoch + 1, out.epochs);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::pair<double, double>> FitUmapCurve(double spread, double min_dist) {
  if (!(std::isfinite(spread) && spread > 0)) {
    return Status::InvalidArgument("FitUmapCurve: spread must be a positive number, got " + FormatNumber(spread));
  }
  if (!(min_dist >= 0 && min_dist <= spread)) {
    return Status::InvalidArgument("FitUmapCurve: min_dist must be in [0, spread = " + FormatNumber(spread) + "], got " +
                                   FormatNumber(min_dist));
  }
  constexpr int kPoints = 300;
  std::vector<double> xs(kPoints), ys(kPoints);
  for (int p = 0; p < kPoints; ++p) {
    xs[p] = 3 * spread * p / (kPoints - 1);
    ys[p] = xs[p] < min_dist ? 1.0 : std::exp(-(xs[p] - min_dist) / spread);
  }
  // Residuals and the 2 x 2 normal equations of Levenberg-Marquardt.
  auto eval = [&](double a, double b, double* jtj, double* jtr) {
    double cost = 0;
    if (jtj) jtj[0] = jtj[1] = jtj[2] = jtr[0] = jtr[1] = 0;
    for (int p = 0; p < kPoints; ++p) {
      const double x = xs[p], xp = x > 0 ? std::pow(x, 2 * b) : 0.0;
      const double f = 1 / (1 + a * xp), r = f - ys[p];
      cost += r * r;
      if (!jtj) continue;
      const double ja = -xp * f * f, jb = x > 0 ? -a * xp * 2 * std::log(x) * f * f : 0.0;
      jtj[0] += ja * ja, jtj[1] += ja * jb, jtj[2] += jb * jb;
      jtr[0] += ja * r, jtr[1] += jb * r;
    }
    return cost;
  };
  double a = 1, b = 1, lambda = 1e-3, jtj[3], jtr[2];
  double cost = eval(a, b, jtj, jtr);
  for (int it = 0; it < 500; ++it) {
    const double m00 = jtj[0] * (1 + lambda), m11 = jtj[2] * (1 + lambda), m01 = jtj[1];
    const double det = m00 * m11 - m01 * m01;
    if (!(std::abs(det) > 0)) break;
    const double da = -(m11 * jtr[0] - m01 * jtr[1]) / det, db = -(m00 * jtr[1] - m01 * jtr[0]) / det;
    const double trial = b + db > 0 ? eval(a + da, b + db, nullptr, nullptr) : std::numeric_limits<double>::infinity();
    if (trial < cost) {
      a += da, b += db;
      const bool done = cost - trial < 1e-15 * cost;
      cost = eval(a, b, jtj, jtr);
      lambda = std::max(lambda / 10, 1e-12);
      if (done) break;
    } else {
      lambda *= 10;
      if (lambda > 1e12) break;
    }
  }
  return std::make_pair(a, b);
}

StatusOr<SparseGraph> FuzzySimplicialSet(const NeighborGraph& g, int64_t n_neighbors, int threads) {
  if (Status s = ValidateNeighborGraph(g, "FuzzySimplicialSet"); !s.ok()) return s;
  if (n_neighbors < 2 || threads < 1) {
    return Status::InvalidArgument("FuzzySimplicialSet: n_neighbors must be >= 2 and threads >= 1, got " +
                                   std::to_string(n_neighbors) + " and " + std::to_string(threads));
  }
  const int64_t kuse = std::min(n_neighbors - 1, g.n - 1);
  if (g.k < kuse) {
    return Status::InvalidArgument("FuzzySimplicialSet: the neighbour graph has k = " + std::to_string(g.k) +
                                   " neighbours per point; n_neighbors = " + std::to_string(n_neighbors) + " needs " +
                                   std::to_string(kuse));
  }
  detail::WorkerPool pool(threads);
  return FuzzyUnion(g, kuse, std::log2(static_cast<double>(kuse + 1)), pool);
}

StatusOr<UmapResult> Umap(const NeighborGraph& g, const UmapOptions& o) {
  const std::string who = "Umap: ";
  if (Status s = ValidateNeighborGraph(g, "Umap"); !s.ok()) return s;
  const int64_t n = g.n;
  if (n > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument(who + "n = " + std::to_string(n) + " exceeds 2^31 - 1 points");
  }
  if (o.n_neighbors < 2) {
    return Status::InvalidArgument(who + "n_neighbors must be >= 2, got " + std::to_string(o.n_neighbors));
  }
  const int64_t kuse = std::min(o.n_neighbors - 1, n - 1);
  if (g.k < kuse) {
    return Status::InvalidArgument(who + "the neighbour graph has k = " + std::to_string(g.k) +
                                   " neighbours per point; n_neighbors = " + std::to_string(o.n_neighbors) +
                                   " needs " + std::to_string(kuse) + " (the point itself counts as one)");
  }
  if (o.n_components < 1 || o.n_components > n - 2) {
    return Status::InvalidArgument(who + "n_components must be in [1, n - 2 = " + std::to_string(n - 2) +
                                   "], got " + std::to_string(o.n_components));
  }
  if (o.metric != "euclidean" && o.metric != "cosine") {
    return Status::InvalidArgument(who + "metric \"" + o.metric + "\" is not supported; expected \"euclidean\" or "
                                   "\"cosine\"");
  }
  if (o.epochs < 0) return Status::InvalidArgument(who + "epochs must be >= 0, got " + std::to_string(o.epochs));
  if (!(std::isfinite(o.learning_rate) && o.learning_rate > 0)) {
    return Status::InvalidArgument(who + "learning_rate must be a positive number, got " + FormatNumber(o.learning_rate));
  }
  if (!(std::isfinite(o.negative_sample_rate) && o.negative_sample_rate >= 0)) {
    return Status::InvalidArgument(who + "negative_sample_rate must be >= 0, got " + FormatNumber(o.negative_sample_rate));
  }
  if (!(std::isfinite(o.repulsion_strength) && o.repulsion_strength >= 0)) {
    return Status::InvalidArgument(who + "repulsion_strength must be >= 0, got " + FormatNumber(o.repulsion_strength));
  }
  if (o.init != "spectral" && o.init != "random" && o.init != "given") {
    return Status::InvalidArgument(who + "init \"" + o.init + "\" is not supported; expected \"spectral\", "
                                   "\"random\" or \"given\"");
  }
  if (!(o.spectral_tolerance > 0) || o.spectral_max_matvecs < 1) {
    return Status::InvalidArgument(who + "spectral_tolerance must be > 0 and spectral_max_matvecs >= 1, got " +
                                   FormatNumber(o.spectral_tolerance) + " and " + std::to_string(o.spectral_max_matvecs));
  }
  if (o.init == "given" && o.initial_layout.empty()) {
    return Status::InvalidArgument(who + "init \"given\" needs initial_layout (n x n_components values)");
  }
  if (!o.initial_layout.empty()) {
    if (Status s = detail::CheckRows("Umap", "initial_layout", o.initial_layout, n, o.n_components); !s.ok()) return s;
  }
  if (o.threads < 1) return Status::InvalidArgument(who + "threads must be >= 1, got " + std::to_string(o.threads));
  auto ab = FitUmapCurve(o.spread, o.min_dist);
  if (!ab.ok()) return Status::InvalidArgument(who + ab.status().message());

  UmapResult out;
  out.a = ab->first;
  out.b = ab->second;
  out.epochs = o.epochs > 0 ? o.epochs : (n <= 10000 ? 500 : 200);
  const int64_t dim = o.n_components;
  detail::WorkerPool pool(o.threads);
  const SparseGraph w = FuzzyGraph(g, kuse, std::log2(static_cast<double>(kuse + 1)), out.epochs, pool);
  if (o.should_stop && o.should_stop()) return Status::Aborted("Umap: stopped on request");

  // Initial layout, scaled as UMAP does: largest |value| 10 plus noise of
  // sd 1e-4 (it separates coincident points), then each axis to [0, 10].
  std::vector<double> y(static_cast<size_t>(n * dim));
  detail::SplitMix64 rng(detail::MixSeed(o.seed, 0x1417));
  bool use_random = o.init == "random", use_given = o.init == "given";
  if (o.init == "spectral") {
    SpectralOptions so;
    so.dim = dim;
    so.seed = detail::MixSeed(o.seed, 0x59ec);
    so.tolerance = o.spectral_tolerance;
    so.max_matvecs = o.spectral_max_matvecs;
    so.should_stop = o.should_stop;
    so.on_progress = o.on_spectral_progress;
    auto spectral = SpectralLayout(w, so, pool);
    if (!spectral.ok()) return Status::Aborted("Umap: " + spectral.status().message());
    out.components = spectral->components;
    out.init_note = spectral->note;
    if (spectral->converged) {
      y = std::move(spectral->layout);
      out.init = "spectral";
    } else {
      use_given = !o.initial_layout.empty();
      use_random = !use_given;
      out.init = use_given ? "fallback: given" : "fallback: random";
    }
  }
  if (out.components == 0) {
    std::vector<int32_t> label;
    out.components = ConnectedComponents(w, &label);
  }
  if (use_given) {
    for (size_t e = 0; e < y.size(); ++e) y[e] = o.initial_layout[e];
    if (out.init.empty()) out.init = "given";
  }
  if (use_random) {
    for (auto& v : y) v = -10 + 20 * rng.Uniform();
    if (out.init.empty()) out.init = "random";
  } else {
    double amax = 0;
    for (double v : y) amax = std::max(amax, std::abs(v));
    const double expand = amax > 0 ? 10 / amax : 1;
    for (auto& v : y) v = v * expand + 1e-4 * rng.Normal();
  }
  for (int64_t c = 0; c < dim; ++c) {
    double lo = y[c], hi = y[c];
    for (int64_t i = 0; i < n; ++i) lo = std::min(lo, y[i * dim + c]), hi = std::max(hi, y[i * dim + c]);
    for (int64_t i = 0; i < n; ++i) y[i * dim + c] = hi > lo ? 10 * (y[i * dim + c] - lo) / (hi - lo) : 5.0;
  }

  std::vector<float> layout(y.begin(), y.end());
  if (Status s = OptimizeLayout(w, out, o, pool, &layout); !s.ok()) return s;
  out.embedding = std::move(layout);
  return out;
}

}  // namespace scdino::eval
