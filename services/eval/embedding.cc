// PCA through OpenCV's symmetric eigen solver on a scatter matrix built
// straight from the float input (whole evaluation sets come here).
#include "eval/embedding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <opencv2/core.hpp>

#include "eval/neighbor_graph.h"

namespace scdino::eval {

StatusOr<Embedding2D> Pca2(const std::vector<float>& x, int64_t n, int64_t d) {
  if (Status s = detail::CheckRows("Pca2", "x", x, n, d); !s.ok()) return s;
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

}  // namespace scdino::eval
