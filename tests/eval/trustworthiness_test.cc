// Trustworthiness against a direct O(n^2) transcription of its definition
// (full distance rows, full sorts), against a value scikit-learn computed
// for a data set both sides can generate bit for bit, and on its limits.
#include "eval/trustworthiness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace scdino::eval {
namespace {

// The definition, as plainly as possible: rank every other point by its
// original-space distance (ties: lower index first), take the k nearest in
// the embedding (same tie rule) and sum how far beyond k they rank.
double BruteForce(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& e, int64_t m,
                  int64_t k) {
  auto dist = [](const std::vector<float>& v, int64_t dim, int64_t i, int64_t j) {
    double s = 0;
    for (int64_t c = 0; c < dim; ++c) s += (double(v[i * dim + c]) - v[j * dim + c]) * (double(v[i * dim + c]) - v[j * dim + c]);
    return s;
  };
  double penalty = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> by_x, by_e;
    for (int64_t j = 0; j < n; ++j)
      if (j != i) by_x.push_back(j), by_e.push_back(j);
    std::sort(by_x.begin(), by_x.end(), [&](int64_t a, int64_t b) {
      const double da = dist(x, d, i, a), db = dist(x, d, i, b);
      return da < db || (da == db && a < b);
    });
    std::sort(by_e.begin(), by_e.end(), [&](int64_t a, int64_t b) {
      const double da = dist(e, m, i, a), db = dist(e, m, i, b);
      return da < db || (da == db && a < b);
    });
    std::vector<int64_t> rank(n, 0);
    for (int64_t r = 0; r < n - 1; ++r) rank[by_x[r]] = r + 1;
    for (int64_t r = 0; r < k; ++r) penalty += std::max<int64_t>(0, rank[by_e[r]] - k);
  }
  return 1.0 - penalty * 2.0 / (double(n) * k * (2.0 * n - 3.0 * k - 1.0));
}

std::vector<float> Normal(int64_t count, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, sd);
  std::vector<float> v(count);
  for (auto& a : v) a = static_cast<float>(g(rng));
  return v;
}

// A rough embedding: the first two coordinates plus noise.
std::vector<float> NoisyProjection(const std::vector<float>& x, int64_t n, int64_t d, double noise, uint64_t seed) {
  auto e = Normal(n * 2, noise, seed);
  for (int64_t i = 0; i < n; ++i) {
    e[2 * i] += x[i * d];
    e[2 * i + 1] += x[i * d + 1];
  }
  return e;
}

TEST(Trustworthiness, MatchesTheDefinitionOnRandomData) {
  for (const auto& [n, d, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{150, 7, 10}, {97, 33, 5}, {40, 3, 1}}) {
    const auto x = Normal(n * d, 1.0, 11 + n);
    const auto e = NoisyProjection(x, n, d, 0.5, 12 + n);
    TrustworthinessOptions o;
    o.k = k;
    const auto t = Trustworthiness(x, n, d, e, 2, o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const double want = BruteForce(x, n, d, e, 2, k);
    EXPECT_NEAR(*t, want, 1e-12) << "n = " << n << ", k = " << k;
    EXPECT_LT(*t, 1.0);  // the noise must cost something, or the test proves little
  }
}

TEST(Trustworthiness, TiesRankTheLowerIndexFirstAsTheDefinitionDoes) {
  // Points on a small integer grid: many exactly equal distances on both sides.
  const int64_t n = 120, d = 3;
  std::vector<float> x(n * d), e(n * 2);
  std::mt19937_64 rng(5);
  for (auto& v : x) v = static_cast<float>(rng() % 4);
  for (auto& v : e) v = static_cast<float>(rng() % 5);
  TrustworthinessOptions o;
  o.k = 7;
  const auto t = Trustworthiness(x, n, d, e, 2, o);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(*t, BruteForce(x, n, d, e, 2, 7), 1e-12);
}

TEST(Trustworthiness, IsOneForAnIsometry) {
  const int64_t n = 200, d = 2;
  const auto x = Normal(n * d, 1.0, 3);
  std::vector<float> e(n * 2);
  for (int64_t i = 0; i < n; ++i) {  // rotate by 90 degrees and shift
    e[2 * i] = -x[2 * i + 1] + 5.0f;
    e[2 * i + 1] = x[2 * i];
  }
  const auto t = Trustworthiness(x, n, d, e, 2);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1.0);
}

// x[i][c] and e[i][c] from integer hashes, so that numpy produces the same
// float32 values: the data behind the sklearn reference value below.
float HashValue(uint64_t i, uint64_t c, uint64_t salt) {
  const uint64_t h = ((i * 2654435761u + c * 40503u + salt * 97u) * 2246822519u) & 0xffffffffu;
  return static_cast<float>(static_cast<double>(h % 1000003) / 1000003.0 - 0.5);
}

// sklearn 1.2.1: with h = ((i*2654435761 + c*40503 + salt*97) * 2246822519)
// & 0xffffffff and v(i, c, salt) = np.float32(h % 1000003 / 1000003.0 - 0.5),
// x[i, c] = v(i, c, 1) (300 x 16), e[i, c] = np.float32(x[i, c] +
// np.float32(0.3) * v(i, c, 2)) (300 x 2):
// trustworthiness(x.astype(np.float64), e.astype(np.float64), n_neighbors=10).
// (Given float32 arrays sklearn rounds the distances to float32, which
// reorders a few near-ties: 0.9623561804335091.)
constexpr double kSklearnHashed = 0.9623620386643233;

TEST(Trustworthiness, MatchesScikitLearnOnAHashedDataSet) {
  const int64_t n = 300, d = 16;
  std::vector<float> x(n * d), e(n * 2);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < d; ++c) x[i * d + c] = HashValue(i, c, 1);
    for (int64_t c = 0; c < 2; ++c) e[i * 2 + c] = x[i * d + c] + 0.3f * HashValue(i, c, 2);
  }
  const auto t = Trustworthiness(x, n, d, e, 2);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(*t, BruteForce(x, n, d, e, 2, 10), 1e-12);
  EXPECT_NEAR(*t, kSklearnHashed, 1e-9);
}

TEST(Trustworthiness, SameValueForEveryThreadCount) {
  const int64_t n = 500, d = 40;
  const auto x = Normal(n * d, 1.0, 21);
  const auto e = NoisyProjection(x, n, d, 1.0, 22);
  std::vector<double> got;
  for (int threads : {1, 2, 5}) {
    TrustworthinessOptions o;
    o.threads = threads;
    const auto t = Trustworthiness(x, n, d, e, 2, o);
    ASSERT_TRUE(t.ok());
    got.push_back(*t);
  }
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
}

TEST(Trustworthiness, StopsWhenAsked) {
  const int64_t n = 3000, d = 64;
  const auto x = Normal(n * d, 1.0, 31);
  const auto e = NoisyProjection(x, n, d, 1.0, 32);
  std::atomic<int> polls{0};
  TrustworthinessOptions o;
  o.threads = 2;
  o.should_stop = [&] { return ++polls > 3; };
  const auto t = Trustworthiness(x, n, d, e, 2, o);
  EXPECT_EQ(t.status().code(), StatusCode::kAborted);
  // Far fewer polls than the ~1100 tiles: it stopped, not finished.
  EXPECT_LT(polls.load(), 20);
}

TEST(Trustworthiness, RejectsBadInputNamingTheValue) {
  const int64_t n = 20, d = 3;
  const auto x = Normal(n * d, 1.0, 41);
  const auto e = Normal(n * 2, 1.0, 42);
  auto message = [](const StatusOr<double>& s) { return s.status().message(); };
  TrustworthinessOptions o;
  o.k = 10;  // must be < n / 2
  auto s = Trustworthiness(x, n, d, e, 2, o);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(message(s).find("k = 10"), std::string::npos) << message(s);
  o.k = 0;
  EXPECT_EQ(Trustworthiness(x, n, d, e, 2, o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.k = 3;
  s = Trustworthiness(x, n, d, std::vector<float>(n * 2 - 1), 2, o);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(message(s).find("embedding has 39 values"), std::string::npos) << message(s);
  auto bad = x;
  bad[2 * d + 1] = std::numeric_limits<float>::quiet_NaN();
  s = Trustworthiness(bad, n, d, e, 2, o);
  EXPECT_NE(message(s).find("x[row 2, column 1]"), std::string::npos) << message(s);
  s = Trustworthiness(std::vector<float>(3), 1, 3, std::vector<float>(2), 2, o);
  EXPECT_NE(message(s).find("n = 1"), std::string::npos) << message(s);
  o.threads = 0;
  s = Trustworthiness(x, n, d, e, 2, o);
  EXPECT_NE(message(s).find("threads"), std::string::npos) << message(s);
}

}  // namespace
}  // namespace scdino::eval
