// PCA on data whose answer is known: a stretched cloud whose main axes PCA
// must find, one feature, constant data, bad input.
#include "eval/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace scdino::eval {
namespace {

std::vector<double> UnitVector(int64_t d, std::mt19937_64& rng) {
  std::normal_distribution<double> g;
  std::vector<double> u(d);
  double norm = 0;
  for (auto& v : u) {
    v = g(rng);
    norm += v * v;
  }
  for (auto& v : u) v /= std::sqrt(norm);
  return u;
}

// The loading vector behind PCA coordinate c: X_c^T proj is proportional to
// the component (X_c^T X_c v = lambda v), so it can be recovered from the
// output alone.
std::vector<double> ImpliedDirection(const std::vector<float>& x, int64_t n, int64_t d, const Embedding2D& e, int c) {
  std::vector<double> mean(d, 0.0), dir(d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) mean[k] += x[i * d + k] / double(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) dir[k] += (x[i * d + k] - mean[k]) * e.xy[i * 2 + c];
  double norm = 0;
  for (double v : dir) norm += v * v;
  for (auto& v : dir) v /= std::sqrt(norm);
  return dir;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

TEST(Pca2, RecoversTheStretchedDirectionsAndTheirVarianceShare) {
  const int64_t n = 2000, d = 10;
  std::mt19937_64 rng(7);
  auto u = UnitVector(d, rng), v = UnitVector(d, rng);
  // Make v orthogonal to u so that the two expected axes are exact.
  const double uv = Dot(u, v);
  double nv = 0;
  for (int64_t k = 0; k < d; ++k) nv += (v[k] -= uv * u[k]) * v[k];
  for (auto& a : v) a /= std::sqrt(nv);
  std::normal_distribution<double> g;
  const double su = 3.0, sv = 1.0, noise = 0.1;
  std::vector<float> x(n * d);
  for (int64_t i = 0; i < n; ++i) {
    const double a = su * g(rng), b = sv * g(rng);
    for (int64_t k = 0; k < d; ++k) x[i * d + k] = static_cast<float>(5.0 + a * u[k] + b * v[k] + noise * g(rng));
  }
  auto e = Pca2(x, n, d);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->xy.size(), size_t(n * 2));
  EXPECT_GT(std::abs(Dot(ImpliedDirection(x, n, d, *e, 0), u)), 0.99);
  EXPECT_GT(std::abs(Dot(ImpliedDirection(x, n, d, *e, 1), v)), 0.99);
  const double total = su * su + sv * sv + d * noise * noise;
  EXPECT_NEAR(e->explained_variance_ratio[0], (su * su + noise * noise) / total, 0.03);
  EXPECT_NEAR(e->explained_variance_ratio[1], (sv * sv + noise * noise) / total, 0.03);
  // The sign convention: each component's largest loading is positive.
  for (int c = 0; c < 2; ++c) {
    auto dir = ImpliedDirection(x, n, d, *e, c);
    size_t big = 0;
    for (size_t k = 1; k < dir.size(); ++k)
      if (std::abs(dir[k]) > std::abs(dir[big])) big = k;
    EXPECT_GT(dir[big], 0) << "component " << c;
  }
}

TEST(Pca2, HandlesOneFeatureAndConstantData) {
  auto one = Pca2({1, 2, 3, 4}, 4, 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_NEAR(one->explained_variance_ratio[0], 1.0, 1e-9);
  EXPECT_EQ(one->explained_variance_ratio[1], 0.0);
  EXPECT_NEAR(one->xy[0], -1.5, 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(one->xy[2 * i + 1], 0.0f);

  auto flat = Pca2(std::vector<float>(12, 3.0f), 4, 3);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  for (float v : flat->xy) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(flat->explained_variance_ratio[0], 0.0);

  // Fewer points than features (OpenCV's n x n path): still finite.
  auto wide = Pca2({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, 3, 4);
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  for (float v : wide->xy) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(wide->explained_variance_ratio[0] + wide->explained_variance_ratio[1], 1.0, 1e-6);
}

using scdino::testing::ExpectInvalid;

TEST(Pca2, RejectsBadInputsNamingWhat) {
  ExpectInvalid(Pca2({1, 2}, 1, 2).status(), "n = 1");
  ExpectInvalid(Pca2({1, 2, 3}, 2, 2).status(), "x has 3 values, expected 2 * 2");
  ExpectInvalid(Pca2({}, 2, 0).status(), "got 0");
  ExpectInvalid(Pca2({1, 2, 3, NAN}, 2, 2).status(), "x[row 1, column 1] = nan");
  ExpectInvalid(Pca2({1, INFINITY, 3, 4}, 2, 2).status(), "x[row 0, column 1] = inf");
}

}  // namespace
}  // namespace scdino::eval
