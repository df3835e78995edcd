// Spectra's implicitly restarted Lanczos (Debian's libspectra-dev, on
// Eigen) on D^-1/2 W D^-1/2 of one component at a time. Its top
// eigenvector D^1/2 1 is known and locked out; the next `dim` are found one
// run each, every converged vector locked out of the following runs (the
// operator projects them out), each started afresh from a seeded random
// vector. A single Krylov sequence holds only one direction of a (nearly)
// degenerate eigenspace, a cycle's cos / sin pair for instance; locking and
// restarting recovers the others. The operator's vector reductions are cut
// into fixed chunks whose partial sums are added in chunk order, and
// Spectra's own arithmetic is serial, which keeps the result independent of
// the thread count.
#include "eval/spectral.h"

#include <Eigen/Core>
#include <Spectra/SymEigsSolver.h>

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

// Vector kernels over fixed chunks; see the file comment.
class VecOps {
 public:
  VecOps(int64_t s, detail::WorkerPool& pool) : s_(s), chunks_((s + kVecChunk - 1) / kVecChunk), pool_(pool) {}

  // Removes from w its components along the locked vectors, twice
  // (classical Gram-Schmidt with one reorthogonalisation).
  void ProjectOut(std::vector<double>& w, const std::vector<std::vector<double>>& locked) {
    const int all = static_cast<int>(locked.size());
    std::vector<double> part(static_cast<size_t>(chunks_ * all));
    for (int pass = 0; pass < 2; ++pass) {
      pool_.Run(chunks_, [&](int64_t c) {
        const int64_t b = c * kVecChunk, e = std::min(s_, b + kVecChunk);
        for (int i = 0; i < all; ++i) {
          double d = 0;
          for (int64_t t = b; t < e; ++t) d += locked[i][t] * w[t];
          part[c * all + i] = d;
        }
        return true;
      });
      std::vector<double> coef(static_cast<size_t>(all), 0.0);
      for (int64_t c = 0; c < chunks_; ++c)
        for (int i = 0; i < all; ++i) coef[i] += part[c * all + i];
      pool_.Run(chunks_, [&](int64_t c) {
        const int64_t b = c * kVecChunk, e = std::min(s_, b + kVecChunk);
        for (int i = 0; i < all; ++i)
          for (int64_t t = b; t < e; ++t) w[t] -= coef[i] * locked[i][t];
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

 private:
  int64_t s_, chunks_;
  detail::WorkerPool& pool_;
};

// M with the locked vectors projected out, P M P (P = I - sum l l^T), as
// Spectra's operator: its leading eigenvector is M's leading one
// orthogonal to them.
class Projected {
 public:
  using Scalar = double;
  Projected(const LocalOperator& op, const std::vector<std::vector<double>>& locked, VecOps& ops,
            const std::function<bool()>& should_stop)
      : op_(op), locked_(locked), ops_(ops), should_stop_(should_stop), x_(op.size()), y_(op.size()) {}
  Eigen::Index rows() const { return op_.size(); }
  Eigen::Index cols() const { return op_.size(); }
  void perform_op(const double* in, double* out) const {
    if (stopped_ || (should_stop_ && should_stop_())) {
      stopped_ = true;  // the rest of the run is wasted: zeros end it fast
      std::fill(out, out + op_.size(), 0.0);
      return;
    }
    std::copy(in, in + op_.size(), x_.begin());
    ops_.ProjectOut(x_, locked_);
    ops_.Apply(op_, x_, y_);
    ops_.ProjectOut(y_, locked_);
    std::copy(y_.begin(), y_.end(), out);
  }
  bool stopped() const { return stopped_; }

 private:
  const LocalOperator& op_;
  const std::vector<std::vector<double>>& locked_;
  VecOps& ops_;
  const std::function<bool()>& should_stop_;
  mutable std::vector<double> x_, y_;
  mutable bool stopped_ = false;
};

// The leading eigenvector of `op` orthogonal to `locked` (which holds
// op.trivial and the vectors found so far), appended to `locked`: Spectra's
// implicitly restarted Lanczos on the projected operator, from a seeded
// random start. False when no Ritz pair is within tolerance after about
// max_matvecs operator applications (*matvecs: how many), or when the
// residual |M x - theta x| of the one Spectra found is above it
// (*residual: its value); *stopped when should_stop fired.
bool NextEigenvector(const LocalOperator& op, std::vector<std::vector<double>>& locked, const SpectralOptions& o,
                     uint64_t seed, detail::WorkerPool& pool, double* residual, int64_t* matvecs, bool* stopped) {
  const int64_t s = op.size();
  *residual = -1;  // not measured until a Ritz pair converges
  const int64_t ncv = std::min<int64_t>(s - static_cast<int64_t>(locked.size()), 48);
  VecOps ops(s, pool);
  Projected projected(op, locked, ops, o.should_stop);
  detail::SplitMix64 rng(seed);
  std::vector<double> start(static_cast<size_t>(s));
  for (auto& x : start) x = rng.Normal();
  ops.ProjectOut(start, locked);
  Spectra::SymEigsSolver<Projected> eigs(projected, 1, ncv);
  eigs.init(start.data());
  // A restart applies the operator about ncv - 1 times.
  const int64_t restarts = std::max<int64_t>(1, (o.max_matvecs - ncv) / std::max<int64_t>(1, ncv - 1));
  eigs.compute(Spectra::SortRule::LargestAlge, restarts, o.tolerance);
  *matvecs = eigs.num_operations();
  if (projected.stopped()) {
    *stopped = true;
    return false;
  }
  // Spectra hands out converged Ritz vectors only.
  if (eigs.info() != Spectra::CompInfo::Successful) return false;
  const Eigen::VectorXd v = eigs.eigenvectors(1).col(0);
  std::vector<double> x(v.data(), v.data() + s), y(static_cast<size_t>(s));
  projected.perform_op(x.data(), y.data());
  const double theta = eigs.eigenvalues()(0);
  for (int64_t t = 0; t < s; ++t) y[t] -= theta * x[t];
  *residual = ops.Norm(y);
  locked.push_back(std::move(x));
  return *residual <= o.tolerance;
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
  int64_t solved = 0, found = 0, wanted = 0;
  for (const auto& mem : members) wanted += static_cast<int64_t>(mem.size()) > 2 * (dim + 1) ? dim : 0;
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
      double residual = -1;
      int64_t matvecs = 0;
      bool stopped = false, ok = true;
      std::vector<std::vector<double>> locked = {op.trivial};
      for (int64_t c = 0; c < dim && ok; ++c) {
        ok = NextEigenvector(op, locked, o, detail::MixSeed(o.seed, rank[r], c), pool, &residual, &matvecs,
                             &stopped);
        if (ok && o.on_progress) o.on_progress(++found, wanted);
      }
      if (stopped) return Status::Aborted("SpectralLayout: stopped on request");
      vecs.assign(locked.begin() + 1, locked.end());
      if (!ok) {
        out.layout.clear();
        out.note = "spectral initialisation did not converge on a component of " + std::to_string(s) + " points (" +
                   (residual < 0 ? std::string("no Ritz pair within tolerance ")
                                 : "residual " + FormatNumber(residual) + " > tolerance ") +
                   FormatNumber(o.tolerance) + " after " + std::to_string(matvecs) + " operator applications)";
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
