// k-means and the cluster scores: the scores' defining cases and a worked
// example, k-means on separated blobs, a bad k and a stop.
#include "eval/clustering.h"

#include <gtest/gtest.h>

#include "support/blobs.h"

namespace scdino::eval {
namespace {

TEST(ClusterScores, IdenticalUpToRenamingIsOneAndAWorkedExample) {
  const std::vector<int64_t> a{0, 0, 1, 1, 2, 2};
  EXPECT_DOUBLE_EQ(AdjustedRandIndex(a, {5, 5, 3, 3, 9, 9}), 1.0);
  EXPECT_NEAR(NormalizedMutualInformation(a, {5, 5, 3, 3, 9, 9}), 1.0, 1e-12);
  // Hubert & Arabie's index by hand: pairs together in both 1, expected
  // (2 * 1) / 6 = 1/3, max (2 + 1) / 2 = 1.5 -> (1 - 1/3) / (1.5 - 1/3) = 4/7.
  EXPECT_NEAR(AdjustedRandIndex({0, 0, 1, 1}, {0, 0, 1, 2}), 4.0 / 7.0, 1e-12);
  // Independent labelings: NMI 0; ARI below 0 here (fewer joint pairs than chance).
  EXPECT_NEAR(NormalizedMutualInformation({0, 0, 1, 1}, {0, 1, 0, 1}), 0.0, 1e-12);
  EXPECT_LT(AdjustedRandIndex({0, 0, 1, 1}, {0, 1, 0, 1}), 0.0);
}

TEST(KMeans, FindsSeparatedBlobs) {
  const auto b = scdino::testing::MakeBlobs(40, 4, 8, 20.0, 3);
  auto x = torch::from_blob(const_cast<float*>(b.x.data()), {b.n, b.d}, torch::kFloat32).clone();
  KMeansOptions o;
  o.seed = 1;
  auto r = KMeans(x, 4, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<int64_t> labels(b.label.begin(), b.label.end());
  EXPECT_DOUBLE_EQ(AdjustedRandIndex(labels, r->assignment), 1.0);
  EXPECT_GT(r->inertia, 0.0);
}

TEST(KMeans, ABadKIsNamedAndAStopEndsIt) {
  auto x = torch::randn({5, 3});
  auto bad = KMeans(x, 6, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("k-means with k 6 needs between 1 and 5"), std::string::npos)
      << bad.status().message();
  KMeansOptions o;
  o.should_stop = [] { return true; };
  EXPECT_EQ(KMeans(x, 2, o).status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace scdino::eval
