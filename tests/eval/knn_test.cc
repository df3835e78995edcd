#include "eval/knn.h"

#include <gtest/gtest.h>

#include <cmath>

namespace scdino::eval {
namespace {

// Train rows on the unit circle at angles 0, 10, 20, 90 degrees (classes 0,
// 0, 1, 1); the query at 5 degrees. Cosine similarities: cos 5 = .99619 (row
// 0 and row 1), cos 15 = .96593 (row 2), cos 85 = .08716 (row 3).
struct Circle {
  torch::Tensor train, labels, test;
  Circle() {
    auto deg = [](double d) { return d * M_PI / 180.0; };
    std::vector<float> v;
    for (double a : {0.0, 10.0, 20.0, 90.0}) {
      v.push_back(static_cast<float>(std::cos(deg(a))));
      v.push_back(static_cast<float>(std::sin(deg(a))));
    }
    train = torch::tensor(v).view({4, 2});
    labels = torch::tensor({0, 0, 1, 1}, torch::kInt64);
    test = torch::tensor({static_cast<float>(std::cos(deg(5.0))), static_cast<float>(std::sin(deg(5.0)))}).view({1, 2});
  }
};

TEST(WeightedKnn, VotesAreWeightedByExpSimilarityOverTemperature) {
  Circle c;
  KnnOptions o;
  o.ks = {1, 3};
  o.temperature = 0.07;
  auto r = WeightedKnn(c.train, c.labels, c.test, 2, o);
  ASSERT_TRUE(r.completed);
  // k=1: the nearest row (0 or 1, both class 0).
  EXPECT_EQ(r.ranked[0][0][0].item<int64_t>(), 0);
  // k=3: class 0 gets 2 exp(.99619/.07), class 1 exp(.96593/.07): class 0.
  EXPECT_EQ(r.ranked[1][0][0].item<int64_t>(), 0);
  EXPECT_EQ(r.ranked[1][0][1].item<int64_t>(), 1);
}

TEST(WeightedKnn, TemperatureDecidesBetweenManyFarAndOneNear) {
  // One class-1 row at the query, three class-0 rows at 60 degrees.
  auto train = torch::tensor({1.0f, 0.0f, 0.5f, 0.8660254f, 0.5f, 0.8660254f, 0.5f, 0.8660254f}).view({4, 2});
  auto labels = torch::tensor({1, 0, 0, 0}, torch::kInt64);
  auto test = torch::tensor({1.0f, 0.0f}).view({1, 2});
  KnnOptions o;
  o.ks = {4};
  // T = 0.07: exp(1/.07) = 1.6e6 beats 3 exp(.5/.07) = 3.8e3.
  o.temperature = 0.07;
  EXPECT_EQ(WeightedKnn(train, labels, test, 2, o).ranked[0][0][0].item<int64_t>(), 1);
  // T = 10: exp(.1) = 1.105 loses to 3 exp(.05) = 3.15.
  o.temperature = 10.0;
  EXPECT_EQ(WeightedKnn(train, labels, test, 2, o).ranked[0][0][0].item<int64_t>(), 0);
}

TEST(WeightedKnn, TiesGoToTheLowerClassAndAbsentClassesRankLast) {
  // Two rows at the same similarity, classes 2 and 1: equal votes.
  auto train = torch::tensor({0.0f, 1.0f, 0.0f, 1.0f}).view({2, 2});
  auto labels = torch::tensor({2, 1}, torch::kInt64);
  auto test = torch::tensor({0.0f, 1.0f}).view({1, 2});
  KnnOptions o;
  o.ks = {2};
  auto r = WeightedKnn(train, labels, test, 4, o);
  EXPECT_EQ(r.ranked[0][0][0].item<int64_t>(), 1);
  EXPECT_EQ(r.ranked[0][0][1].item<int64_t>(), 2);
  // Classes 0 and 3 have no votes: after, lower first.
  EXPECT_EQ(r.ranked[0][0][2].item<int64_t>(), 0);
  EXPECT_EQ(r.ranked[0][0][3].item<int64_t>(), 3);
}

TEST(WeightedKnn, ChunkingDoesNotChangeResultsAndKIsCappedAtTheTrainingRows) {
  torch::manual_seed(3);
  auto train = torch::randn({50, 8});
  auto labels = torch::randint(0, 5, {50}, torch::kInt64);
  auto test = torch::randn({37, 8});
  KnnOptions whole;
  whole.ks = {1, 5, 200};
  KnnOptions chunked = whole;
  chunked.memory_bytes = 50 * 4 * 3;  // three queries per chunk
  int64_t calls = 0;
  chunked.on_chunk = [&](int64_t done, int64_t total) {
    ++calls;
    EXPECT_EQ(total, 37);
    return true;
  };
  auto a = WeightedKnn(train, labels, test, 5, whole);
  auto b = WeightedKnn(train, labels, test, 5, chunked);
  EXPECT_EQ(b.chunk, 3);
  EXPECT_EQ(calls, 13);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(a.ranked[i], b.ranked[i])) << "k " << whole.ks[i];
  EXPECT_EQ(a.k_used, (std::vector<int64_t>{1, 5, 50}));
}

TEST(WeightedKnn, StopsWhenAskedBetweenChunks) {
  auto train = torch::randn({10, 4});
  auto labels = torch::zeros({10}, torch::kInt64);
  KnnOptions o;
  o.memory_bytes = 10 * 4;  // one query per chunk
  o.on_chunk = [](int64_t done, int64_t) { return done < 2; };
  auto r = WeightedKnn(train, labels, torch::randn({5, 4}), 1, o);
  EXPECT_FALSE(r.completed);
}

TEST(WeightedKnn, BadInputNamesWhatIsWrong) {
  auto train = torch::randn({4, 3});
  KnnOptions o;
  try {
    WeightedKnn(train, torch::tensor({0, 1, 2, 7}, torch::kInt64), torch::randn({2, 3}), 3, o);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(WeightedKnn(train, torch::zeros({4}, torch::kInt64), torch::randn({2, 5}), 1, o), c10::Error);
  o.ks = {0};
  EXPECT_THROW(WeightedKnn(train, torch::zeros({4}, torch::kInt64), torch::randn({2, 3}), 1, o), c10::Error);
}

}  // namespace
}  // namespace scdino::eval
