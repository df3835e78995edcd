// Thick-restart Lanczos (Wu & Simon 2000) on D^-1/2 W D^-1/2 of one
// component at a time. Its top eigenvector D^1/2 1 is known and locked out;
// the next `dim` are found one run each, every converged vector locked out
// of the following runs, each started afresh from a random vector. A single
// Krylov sequence holds only one direction of a (nearly) degenerate
// eigenspace, a cycle's cos / sin pair for instance; locking and restarting
// recovers the others. Vector reductions are cut into fixed chunks whose
// partial sums are added in chunk order, which keeps the result independent
// of the thread count.
#include "eval/spectral.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace scdino::eval {
namespace {

constexpr int64_t kVecChunk = 4096;

// One component's operator M = D^-1/2 W D^-1/2 in local indices.
struct LocalOperator {
  std::vector<int64_t> offsets;
  std::vector<int32_t> cols;
  std::vector<double> vals;
  std::vector<double> trivial;  // D^1/2 1, normalised: M's eigenvector for 1
  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

// Eigen-decomposition of a small dense symmetric matrix by cyclic Jacobi
// rotations. a: m x m row-major (destroyed); eigenvalues in `values`,
// eigenvectors as the columns of `vectors` (m x m row-major).
void JacobiEigen(std::vector<double> a, int m, std::vector<double>* values, std::vector<double>* vectors) {
  std::vector<double>& v = *vectors;
  v.assign(static_cast<size_t>(m * m), 0.0);
  for (int i = 0; i < m; ++i) v[i * m + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int p = 0; p < m; ++p) {
      diag += a[p * m + p] * a[p * m + p];
      for (int q = p + 1; q < m; ++q) off += a[p * m + q] * a[p * m + q];
    }
    if (off <= 1e-30 * diag || off == 0) break;
    for (int p = 0; p < m; ++p) {
      for (int q = p + 1; q < m; ++q) {
        const double apq = a[p * m + q];
        if (apq == 0) continue;
        // The rotation that zeroes a_pq: t = tan(angle), the smaller root
        // of t^2 + 2 theta t - 1 = 0.
        const double theta = (a[q * m + q] - a[p * m + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < m; ++k) {
          const double kp = a[k * m + p], kq = a[k * m + q];
          a[k * m + p] = c * kp - s * kq;
          a[k * m + q] = s * kp + c * kq;
        }
        for (int k = 0; k < m; ++k) {
          const double pk = a[p * m + k], qk = a[q * m + k];
          a[p * m + k] = c * pk - s * qk;
          a[q * m + k] = s * pk + c * qk;
        }
        for (int k = 0; k < m; ++k) {
          const double kp = v[k * m + p], kq = v[k * m + q];
          v[k * m + p] = c * kp - s * kq;
          v[k * m + q] = s * kp + c * kq;
        }
      }
    }
  }
  values->resize(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) (*values)[i] = a[i * m + i];
}

// Vector kernels over fixed chunks; see the file comment.
class VecOps {
 public:
  VecOps(int64_t s, detail::WorkerPool& pool) : s_(s), chunks_((s + kVecChunk - 1) / kVecChunk), pool_(pool) {}

  // Removes from w its components along the locked vectors and along
  // basis[0..count), twice (classical Gram-Schmidt with one
  // reorthogonalisation); h[i] receives the total coefficient along basis[i].
  void Orthogonalise(std::vector<double>& w, const std::vector<std::vector<double>>& locked,
                     const std::vector<std::vector<double>>& basis, int count, std::vector<double>* h) {
    const int all = count + static_cast<int>(locked.size());
    auto vec = [&](int i) -> const std::vector<double>& { return i < count ? basis[i] : locked[i - count]; };
    h->assign(static_cast<size_t>(count), 0.0);
    std::vector<double> part(static_cast<size_t>(chunks_ * all));
    for (int pass = 0; pass < 2; ++pass) {
      pool_.Run(chunks_, [&](int64_t c) {
        const int64_t b = c * kVecChunk, e = std::min(s_, b + kVecChunk);
        for (int i = 0; i < all; ++i) {
          const std::vector<double>& u = vec(i);
          double d = 0;
          for (int64_t t = b; t < e; ++t) d += u[t] * w[t];
          part[c * all + i] = d;
        }
        return true;
      });
      std::vector<double> coef(static_cast<size_t>(all), 0.0);
      for (int64_t c = 0; c < chunks_; ++c)
        for (int i = 0; i < all; ++i) coef[i] += part[c * all + i];
      for (int i = 0; i < count; ++i) (*h)[i] += coef[i];
      pool_.Run(chunks_, [&](int64_t c) {
        const int64_t b = c * kVecChunk, e = std::min(s_, b + kVecChunk);
        for (int i = 0; i < all; ++i) {
          const std::vector<double>& u = vec(i);
          for (int64_t t = b; t < e; ++t) w[t] -= coef[i] * u[t];
        }
        return true;
      });
    }
  }

  double Norm(const std::vector<double>& w) {
    std::vector<double> part(static_cast<size_t>(chunks_));
    pool_.Run(chunks_, [&](int64_t c) {
      double d = 0;
      for (int64_t t = c * kVecChunk; t < std::min(s_, (c + 1) * kVecChunk); ++t) d += w[t] * w[t];
      part[c] = d;
      return true;
    });
    return std::sqrt(std::accumulate(part.begin(), part.end(), 0.0));
  }

  void Apply(const LocalOperator& m, const std::vector<double>& x, std::vector<double>& y) {
    pool_.Run(chunks_, [&](int64_t c) {
      for (int64_t i = c * kVecChunk; i < std::min(s_, (c + 1) * kVecChunk); ++i) {
        double d = 0;
        for (int64_t e = m.offsets[i]; e < m.offsets[i + 1]; ++e) d += m.vals[e] * x[m.cols[e]];
        y[i] = d;
      }
      return true;
    });
  }

  // out[i] = sum_t basis[t] * coef[t * stride + i] for i < count.
  void Combine(const std::vector<std::vector<double>>& basis, int terms, const std::vector<double>& coef, int stride,
               int count, std::vector<std::vector<double>>* out) {
    out->assign(static_cast<size_t>(count), std::vector<double>(static_cast<size_t>(s_), 0.0));
    pool_.Run(chunks_, [&](int64_t c) {
      for (int i = 0; i < count; ++i)
        for (int t = 0; t < terms; ++t)
          for (int64_t x = c * kVecChunk; x < std::min(s_, (c + 1) * kVecChunk); ++x)
            (*out)[i][x] += basis[t][x] * coef[t * stride + i];
      return true;
    });
  }

 private:
  int64_t s_, chunks_;
  detail::WorkerPool& pool_;
};

// The leading eigenvector of `op` orthogonal to `locked` (which holds
// op.trivial and the vectors found so far), appended to `locked`. False
// when the residual is still above tolerance after max_matvecs operator
// applications (*residual: its value); *stopped when should_stop fired.
bool NextEigenvector(const LocalOperator& op, std::vector<std::vector<double>>& locked, const SpectralOptions& o,
                     uint64_t seed, detail::WorkerPool& pool, double* residual, bool* stopped) {
  const int64_t s = op.size();
  const int m = static_cast<int>(std::min<int64_t>(s - static_cast<int64_t>(locked.size()), 48));
  const int keep = m / 3;
  VecOps ops(s, pool);
  detail::SplitMix64 rng(seed);
  std::vector<std::vector<double>> basis(static_cast<size_t>(m + 1), std::vector<double>(static_cast<size_t>(s)));
  std::vector<double> hm(static_cast<size_t>(m * m), 0.0), h, w(static_cast<size_t>(s)), theta, y;
  auto random_unit = [&](int count, std::vector<double>& v) {
    for (auto& x : v) x = rng.Normal();
    ops.Orthogonalise(v, locked, basis, count, &h);
    const double norm = ops.Norm(v);
    for (auto& x : v) x /= norm;
  };
  random_unit(0, basis[0]);
  int cur = 0;
  for (int64_t matvecs = 0;;) {
    double beta = 0;
    for (int j = cur; j < m; ++j) {
      if (o.should_stop && o.should_stop()) {
        *stopped = true;
        return false;
      }
      ops.Apply(op, basis[j], w);
      ++matvecs;
      ops.Orthogonalise(w, locked, basis, j + 1, &h);
      for (int i = 0; i <= j; ++i) hm[i * m + j] = hm[j * m + i] = h[i];
      beta = ops.Norm(w);
      if (beta > 1e-10) {
        for (int64_t t = 0; t < s; ++t) basis[j + 1][t] = w[t] / beta;
      } else {
        // An invariant subspace: carry on from a fresh direction, uncoupled.
        beta = 0;
        if (j + 1 < m) random_unit(j + 1, basis[j + 1]);
      }
      if (j + 1 < m) hm[(j + 1) * m + j] = hm[j * m + j + 1] = beta;
    }
    JacobiEigen(hm, m, &theta, &y);
    std::vector<int> idx(static_cast<size_t>(m));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int p, int q) { return theta[p] > theta[q]; });
    std::vector<double> ys(static_cast<size_t>(m * m));  // columns sorted by Ritz value
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < m; ++c) ys[r * m + c] = y[r * m + idx[c]];
    *residual = std::abs(beta * ys[(m - 1) * m]);
    const bool done = *residual <= o.tolerance;
    if (done || matvecs >= o.max_matvecs) {
      std::vector<std::vector<double>> v;
      ops.Combine(basis, m, ys, m, 1, &v);
      locked.push_back(std::move(v[0]));
      return done;
    }
    // Thick restart: keep the best Ritz vectors, continue from the residual
    // direction; the projected matrix becomes diag(theta) plus an arrow.
    std::vector<std::vector<double>> kept;
    ops.Combine(basis, m, ys, m, keep, &kept);
    for (int i = 0; i < keep; ++i) basis[i].swap(kept[i]);
    basis[keep].swap(basis[m]);
    std::fill(hm.begin(), hm.end(), 0.0);
    for (int i = 0; i < keep; ++i) hm[i * m + i] = theta[idx[i]];
    cur = keep;
  }
}

}  // namespace

int64_t ConnectedComponents(const SparseGraph& w, std::vector<int32_t>* label) {
  const int64_t n = w.n();
  label->assign(static_cast<size_t>(n), -1);
  std::vector<int32_t> stack;
  int32_t count = 0;
  for (int64_t s = 0; s < n; ++s) {
    if ((*label)[s] >= 0) continue;
    (*label)[s] = count;
    stack.push_back(static_cast<int32_t>(s));
    while (!stack.empty()) {
      const int32_t i = stack.back();
      stack.pop_back();
      for (int64_t e = w.offsets[i]; e < w.offsets[i + 1]; ++e) {
        if ((*label)[w.cols[e]] < 0) {
          (*label)[w.cols[e]] = count;
          stack.push_back(w.cols[e]);
        }
      }
    }
    ++count;
  }
  return count;
}

StatusOr<SpectralResult> SpectralLayout(const SparseGraph& w, const SpectralOptions& o, detail::WorkerPool& pool) {
  const int64_t n = w.n(), dim = o.dim;
  SpectralResult out;
  std::vector<int32_t> label;
  out.components = ConnectedComponents(w, &label);
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(out.components));
  for (int64_t i = 0; i < n; ++i) members[label[i]].push_back(static_cast<int32_t>(i));
  std::vector<int32_t> rank(members.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int32_t p, int32_t q) { return members[p].size() > members[q].size(); });
  std::vector<double> degree(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = w.offsets[i]; e < w.offsets[i + 1]; ++e) degree[i] += w.vals[e];

  const int64_t side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(out.components))));
  out.layout.assign(static_cast<size_t>(n * dim), 0.0);
  std::vector<int32_t> local(static_cast<size_t>(n), -1);
  detail::SplitMix64 rng(detail::MixSeed(o.seed, 0x5bec));
  int64_t solved = 0;
  for (int64_t r = 0; r < out.components; ++r) {
    const auto& mem = members[rank[r]];
    const int64_t s = static_cast<int64_t>(mem.size());
    // A single component keeps its eigenvectors as they are; several are
    // each scaled to |coordinate| <= 0.4 around a grid node 1 apart.
    const double anchor[2] = {static_cast<double>(r % side), static_cast<double>(r / side)};
    const double scale = out.components > 1 ? 0.4 : 1.0;
    std::vector<std::vector<double>> vecs;
    if (s > 2 * (dim + 1)) {
      LocalOperator op;
      for (int64_t t = 0; t < s; ++t) local[mem[t]] = static_cast<int32_t>(t);
      op.offsets.push_back(0);
      op.trivial.resize(static_cast<size_t>(s));
      double norm = 0;
      for (int64_t t = 0; t < s; ++t) {
        const int32_t i = mem[t];
        for (int64_t e = w.offsets[i]; e < w.offsets[i + 1]; ++e) {
          op.cols.push_back(local[w.cols[e]]);
          op.vals.push_back(w.vals[e] / std::sqrt(degree[i] * degree[w.cols[e]]));
        }
        op.offsets.push_back(static_cast<int64_t>(op.cols.size()));
        op.trivial[t] = std::sqrt(degree[i]);
        norm += degree[i];
      }
      for (auto& v : op.trivial) v /= std::sqrt(norm);
      double residual = 0;
      bool stopped = false, ok = true;
      std::vector<std::vector<double>> locked = {op.trivial};
      for (int64_t c = 0; c < dim && ok; ++c) {
        ok = NextEigenvector(op, locked, o, detail::MixSeed(o.seed, rank[r], c), pool, &residual, &stopped);
      }
      if (stopped) return Status::Aborted("SpectralLayout: stopped on request");
      vecs.assign(locked.begin() + 1, locked.end());
      if (!ok) {
        out.layout.clear();
        out.note = "spectral initialisation did not converge on a component of " + std::to_string(s) +
                   " points (residual " + FormatNumber(residual) + " > tolerance " + FormatNumber(o.tolerance) +
                   " after " + std::to_string(o.max_matvecs) + " operator applications)";
        return out;
      }
      ++solved;
      for (auto& v : vecs) {
        const auto big = std::max_element(v.begin(), v.end(), [](double p, double q) { return std::abs(p) < std::abs(q); });
        const double amax = std::abs(*big), sign = *big < 0 ? -1.0 : 1.0;
        for (auto& x : v) x *= sign * (out.components > 1 && amax > 0 ? scale / amax : 1.0);
      }
    }
    for (int64_t t = 0; t < s; ++t) {
      for (int64_t c = 0; c < dim; ++c) {
        const double base = out.components > 1 && c < 2 ? anchor[c] : 0.0;
        const double v = vecs.empty() ? scale * (2 * rng.Uniform() - 1) : vecs[c][t];
        out.layout[mem[t] * dim + c] = base + v;
      }
    }
  }
  out.converged = true;
  if (out.components > 1) {
    out.note = "the graph has " + std::to_string(out.components) + " connected components; " +
               std::to_string(solved) + " were laid out spectrally on a grid, the smaller ones at random";
  }
  return out;
}

}  // namespace scdino::eval
