// PCA through OpenCV's symmetric eigen solver on a scatter matrix built
// straight from the float input (whole evaluation sets come here); t-SNE
// written out, exact and O(n^2), because it only sees subsampled sets of a
// few thousand cells and an exact, seeded, single-threaded implementation is
// what makes the figures reproducible.
#include "eval/embedding.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include <opencv2/core.hpp>

namespace scdino::eval {
namespace {

// Exact t-SNE keeps an n x n float matrix and does n^2 / 2 pair updates per
// iteration; beyond this the caller should subsample (or use Barnes-Hut).
constexpr int64_t kMaxTsnePoints = 10000;

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status CheckRows(const char* fn, const std::vector<float>& x, int64_t n, int64_t d) {
  const std::string f = fn;
  if (n < 2) return Status::InvalidArgument(f + ": needs at least 2 points, got n = " + std::to_string(n));
  if (d < 1) return Status::InvalidArgument(f + ": needs at least 1 feature per point, got d = " + std::to_string(d));
  if (n > std::numeric_limits<int64_t>::max() / d || static_cast<uint64_t>(n * d) != x.size()) {
    return Status::InvalidArgument(f + ": x has " + std::to_string(x.size()) + " values, expected n * d = " +
                                   std::to_string(n) + " * " + std::to_string(d));
  }
  for (size_t k = 0; k < x.size(); ++k) {
    if (!std::isfinite(x[k])) {
      return Status::InvalidArgument(f + ": x[row " + std::to_string(k / d) + ", column " + std::to_string(k % d) +
                                     "] = " + Num(x[k]) + " is not finite");
    }
  }
  return Status::Ok();
}

// Standard normal from raw 64-bit draws (Box-Muller): unlike
// std::normal_distribution it gives the same numbers on every standard library.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // 53-bit uniforms in (0, 1]: log(0) cannot happen.
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 6.283185307179586476925 * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Lanes of independent partial sums in the pair loops: without them the
// float reductions are one dependency chain (the compiler may not reorder
// float additions), with them GCC and Clang vectorise at -O2.
constexpr int kLanes = 8;

// Squared Euclidean distances into the full n x n matrix `out` (diagonal 0).
void SquaredDistances(const float* __restrict x, int64_t n, int64_t d, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    out[i * n + i] = 0.0f;
    for (int64_t j = i + 1; j < n; ++j) {
      const float* xj = x + j * d;
      float s[kLanes] = {};
      int64_t k = 0;
      for (; k + kLanes <= d; k += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const float a = xi[k + l] - xj[k + l];
          s[l] += a * a;
        }
      }
      for (; k < d; ++k) {
        const float a = xi[k] - xj[k];
        s[0] += a * a;
      }
      double v = 0;
      for (int l = 0; l < kLanes; ++l) v += s[l];
      out[i * n + j] = static_cast<float>(v);
      out[j * n + i] = static_cast<float>(v);
    }
  }
}

// One sweep over the pairs i < j of the layout (y, n points). With
// w = 1 / (1 + |y_i - y_j|^2) it accumulates, per point, the attractive part
// sum_j exag p_ij w (y_i - y_j) into a and the repulsive part
// sum_j w^2 (y_i - y_j) into r (both zeroed by the caller), and returns
// sum_{i<j} w, i.e. Z / 2. Z is only known after the sweep, so the two parts
// are kept apart and combined by the caller: one pass instead of two.
// p is the upper triangle of the n x n row-major P. Float, restrict and
// lane accumulators make this loop vectorise: it is the whole cost of t-SNE.
double PairSweep(int64_t n, const float* __restrict p, float exag, const float* __restrict yx,
                 const float* __restrict yy, float* __restrict ax, float* __restrict ay, float* __restrict rx,
                 float* __restrict ry) {
  double zhalf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float xi = yx[i], yi = yy[i];
    const float* pi = p + i * n;
    float sax[kLanes] = {}, say[kLanes] = {}, srx[kLanes] = {}, sry[kLanes] = {}, sz[kLanes] = {};
    auto pair = [&](int64_t j, int l) {
      const float dx = xi - yx[j], dy = yi - yy[j];
      const float w = 1.0f / (1.0f + dx * dx + dy * dy);
      const float a = exag * pi[j] * w, r = w * w;
      sz[l] += w;
      sax[l] += a * dx;
      say[l] += a * dy;
      srx[l] += r * dx;
      sry[l] += r * dy;
      ax[j] -= a * dx;
      ay[j] -= a * dy;
      rx[j] -= r * dx;
      ry[j] -= r * dy;
    };
    int64_t j = i + 1;
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) pair(j + l, l);
    }
    for (; j < n; ++j) pair(j, 0);
    double t[5] = {};
    for (int l = 0; l < kLanes; ++l) {
      t[0] += sax[l];
      t[1] += say[l];
      t[2] += srx[l];
      t[3] += sry[l];
      t[4] += sz[l];
    }
    ax[i] += static_cast<float>(t[0]);
    ay[i] += static_cast<float>(t[1]);
    rx[i] += static_cast<float>(t[2]);
    ry[i] += static_cast<float>(t[3]);
    zhalf += t[4];
  }
  return zhalf;
}

// Replaces row i of P (squared distances) by the conditional p_{j|i} whose
// entropy is log(perplexity): binary search on the precision beta.
// `dist` and `p` are caller-owned scratch of n values, reused across rows.
void ConditionalRow(float* row, int64_t n, int64_t i, double perplexity, std::vector<double>& dist,
                    std::vector<double>& p) {
  // Distances are shifted by the nearest neighbour's so that exp() cannot
  // underflow to an all-zero row; the normalised P is unchanged by the shift.
  double dmin = std::numeric_limits<double>::infinity(), dsum = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j != i) dmin = std::min(dmin, double(row[j]));
  }
  for (int64_t j = 0; j < n; ++j) {
    dist[j] = j == i ? 0.0 : double(row[j]) - dmin;
    dsum += dist[j];
  }
  const double target = std::log(perplexity);
  // Start at the inverse mean distance so that the search is scale-free.
  double beta = dsum > 0 ? (n - 1) / dsum : 1.0;
  double lo = 0.0, hi = std::numeric_limits<double>::infinity();
  for (int it = 0; it < 200; ++it) {
    double sum = 0, dp = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) {
        p[j] = 0;
        continue;
      }
      p[j] = std::exp(-beta * dist[j]);
      sum += p[j];
      dp += dist[j] * p[j];
    }
    // sum >= 1: the nearest neighbour has shifted distance 0.
    const double h = std::log(sum) + beta * dp / sum;
    for (int64_t j = 0; j < n; ++j) p[j] /= sum;
    const double diff = h - target;
    if (std::abs(diff) < 1e-5) break;
    if (diff > 0) {  // too flat: sharpen
      lo = beta;
      beta = std::isinf(hi) ? beta * 2 : (beta + hi) / 2;
    } else {
      hi = beta;
      beta = (beta + lo) / 2;
    }
  }
  for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(p[j]);
}

}  // namespace

StatusOr<Embedding2D> Pca2(const std::vector<float>& x, int64_t n, int64_t d) {
  if (Status s = CheckRows("Pca2", x, n, d); !s.ok()) return s;
  if (n > std::numeric_limits<int>::max() || d > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument("Pca2: n = " + std::to_string(n) + ", d = " + std::to_string(d) +
                                   " exceed OpenCV's int dimensions");
  }
  // Whole evaluation sets come here (10^5 cells x 768 features is 300 MB
  // as float): the input is viewed, not copied, and centred block by block.
  const cv::Mat X(static_cast<int>(n), static_cast<int>(d), CV_32F, const_cast<float*>(x.data()));
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < d; ++k) mean[k] += x[i * d + k];
  }
  for (auto& m : mean) m /= static_cast<double>(n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < d; ++k) total += (x[i * d + k] - mean[k]) * (x[i * d + k] - mean[k]);
  }

  Embedding2D out;
  out.xy.assign(static_cast<size_t>(n) * 2, 0.0f);
  if (!(total > 0)) return out;  // all points equal: nothing to project

  cv::Mat components;  // rows: unit principal directions, largest first
  if (n >= d) {
    // d x d scatter matrix in double, accumulated over blocks of centred
    // rows: memory stays at one block, and cv::gemm is an order of magnitude
    // faster than cv::mulTransposed on float input.
    const cv::Mat mean_row(1, static_cast<int>(d), CV_64F, mean.data());
    cv::Mat scatter = cv::Mat::zeros(static_cast<int>(d), static_cast<int>(d), CV_64F), block, values;
    constexpr int kBlock = 256;
    for (int r = 0; r < X.rows; r += kBlock) {
      const int m = std::min(kBlock, X.rows - r);
      X.rowRange(r, r + m).convertTo(block, CV_64F);
      block -= cv::repeat(mean_row, m, 1);
      cv::gemm(block, block, 1.0, scatter, 1.0, scatter, cv::GEMM_1_T);
    }
    cv::eigen(scatter, values, components);
  } else {
    // Fewer points than features: cv::PCA solves the smaller n x n problem.
    cv::Mat xd;
    X.convertTo(xd, CV_64F);
    components = cv::PCA(xd, cv::noArray(), cv::PCA::DATA_AS_ROW, 2).eigenvectors;
  }
  for (int c = 0; c < std::min(2, components.rows); ++c) {
    cv::Mat v = components.row(c).clone();
    // A null eigenvalue can come back as a NaN or zero vector from the
    // n x n path. No variance lies along it, so its coordinate stays 0.
    if (!cv::checkRange(v) || cv::norm(v) < 0.5) continue;
    v /= cv::norm(v);
    cv::Point maxloc;
    cv::minMaxLoc(cv::abs(v), nullptr, nullptr, nullptr, &maxloc);
    if (v.at<double>(maxloc) < 0) v = -v;
    const double* vp = v.ptr<double>(0);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      double p = 0;
      for (int64_t k = 0; k < d; ++k) p += (x[i * d + k] - mean[k]) * vp[k];
      out.xy[i * 2 + c] = static_cast<float>(p);
      var += p * p;
    }
    out.explained_variance_ratio[c] = var / total;
  }
  return out;
}

StatusOr<Embedding2D> Tsne(const std::vector<float>& x, int64_t n, int64_t d, const TsneOptions& o) {
  if (Status s = CheckRows("Tsne", x, n, d); !s.ok()) return s;
  if (n > kMaxTsnePoints) {
    return Status::InvalidArgument("Tsne: exact t-SNE is O(n^2); n = " + std::to_string(n) + " exceeds " +
                                   std::to_string(kMaxTsnePoints) + ", subsample the points first");
  }
  if (!(std::isfinite(o.perplexity) && o.perplexity > 0)) {
    return Status::InvalidArgument("Tsne: perplexity must be a positive number, got " + Num(o.perplexity));
  }
  if (o.iterations < 0) {
    return Status::InvalidArgument("Tsne: iterations must be >= 0, got " + std::to_string(o.iterations));
  }
  if (!(std::isfinite(o.learning_rate) && o.learning_rate > 0)) {
    return Status::InvalidArgument("Tsne: learning_rate must be a positive number, got " + Num(o.learning_rate));
  }
  if (!(std::isfinite(o.early_exaggeration) && o.early_exaggeration > 0)) {
    return Status::InvalidArgument("Tsne: early_exaggeration must be a positive number, got " +
                                   Num(o.early_exaggeration));
  }
  if (o.exaggeration_iterations < 0) {
    return Status::InvalidArgument("Tsne: exaggeration_iterations must be >= 0, got " +
                                   std::to_string(o.exaggeration_iterations));
  }
  const double perplexity = std::min(o.perplexity, std::max(1.0, (n - 1) / 3.0));
  const size_t N = static_cast<size_t>(n);

  // P: conditional rows, then symmetrised into the upper triangle, which is
  // all the gradient loop reads.
  std::vector<float> P(N * N);
  SquaredDistances(x.data(), n, d, P.data());
  {
    std::vector<double> dist(N), p(N);
    for (int64_t i = 0; i < n; ++i) ConditionalRow(P.data() + i * n, n, i, perplexity, dist, p);
  }
  double psum = 0;
  for (size_t i = 0; i < N; ++i) {
    for (size_t j = i + 1; j < N; ++j) psum += 2.0 * (double(P[i * N + j]) + P[j * N + i]);
  }
  for (size_t i = 0; i < N; ++i) {
    for (size_t j = i + 1; j < N; ++j) {
      const double v = (double(P[i * N + j]) + P[j * N + i]) / psum;
      // Floored as in the reference implementations, so that no pair is
      // entirely without attraction.
      P[i * N + j] = static_cast<float>(std::max(v, 1e-12));
    }
  }

  // The layout and its momentum live in double; the pair sweep reads a
  // float copy (single precision is ample for pairwise gradients, and it
  // halves the cost).
  std::vector<double> yx(N), yy(N), ux(N, 0.0), uy(N, 0.0), gx(N, 1.0), gy(N, 1.0);
  {
    Gaussian g(o.seed);
    for (size_t i = 0; i < N; ++i) {
      yx[i] = 1e-4 * g();
      yy[i] = 1e-4 * g();
    }
  }
  std::vector<float> fx(N), fy(N), ax(N), ay(N), rx(N), ry(N);
  for (int64_t iter = 0; iter < o.iterations; ++iter) {
    const bool early = iter < o.exaggeration_iterations;
    const double momentum = early ? 0.5 : 0.8;
    for (size_t i = 0; i < N; ++i) {
      fx[i] = static_cast<float>(yx[i]);
      fy[i] = static_cast<float>(yy[i]);
    }
    std::fill(ax.begin(), ax.end(), 0.0f);
    std::fill(ay.begin(), ay.end(), 0.0f);
    std::fill(rx.begin(), rx.end(), 0.0f);
    std::fill(ry.begin(), ry.end(), 0.0f);
    const double zhalf = PairSweep(n, P.data(), static_cast<float>(early ? o.early_exaggeration : 1.0), fx.data(),
                                   fy.data(), ax.data(), ay.data(), rx.data(), ry.data());
    const double inv_z = 1.0 / (2.0 * zhalf);
    double mx = 0, my = 0;
    for (size_t i = 0; i < N; ++i) {
      // dC/dy_i = 4 sum_j (p_ij - w_ij / Z) w_ij (y_i - y_j).
      const double grad[2] = {4.0 * (ax[i] - rx[i] * inv_z), 4.0 * (ay[i] - ry[i] * inv_z)};
      double* u[2] = {&ux[i], &uy[i]};
      double* gain[2] = {&gx[i], &gy[i]};
      for (int c = 0; c < 2; ++c) {
        // Delta-bar-delta: grow the step where the gradient keeps pointing
        // against the last update, shrink it where it flips.
        const bool same = (grad[c] > 0) == (*u[c] > 0);
        *gain[c] = std::max(same ? *gain[c] * 0.8 : *gain[c] + 0.2, 0.01);
        *u[c] = momentum * *u[c] - o.learning_rate * *gain[c] * grad[c];
      }
      yx[i] += ux[i];
      yy[i] += uy[i];
      mx += yx[i];
      my += yy[i];
    }
    // Keep the layout centred: the cost is translation-invariant and drift
    // would only cost precision.
    mx /= n;
    my /= n;
    for (size_t i = 0; i < N; ++i) {
      yx[i] -= mx;
      yy[i] -= my;
    }
  }

  Embedding2D out;
  out.xy.resize(N * 2);
  for (size_t i = 0; i < N; ++i) {
    out.xy[2 * i] = static_cast<float>(yx[i]);
    out.xy[2 * i + 1] = static_cast<float>(yy[i]);
  }
  return out;
}

}  // namespace scdino::eval
