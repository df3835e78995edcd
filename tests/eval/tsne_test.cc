// Barnes-Hut t-SNE and the exact kNN graph it starts from: separated
// clusters must stay separated, the output must be reproducible bit for
// bit, a stop request must end it promptly and bad input must be named.
#include "eval/tsne.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "eval/neighbor_graph.h"
#include "eval/trustworthiness.h"
#include "support/blobs.h"

namespace scdino::eval {
namespace {

using scdino::testing::Blobs;
using scdino::testing::Graph;
using scdino::testing::KnnAccuracy;
using scdino::testing::MakeBlobs;

TEST(ExactKnn, MatchesASortOfAllDistances) {
  const Blobs b = MakeBlobs(40, 3, 9, 3.0, 1);
  const auto g = Graph(b, 6);
  ASSERT_TRUE(ValidateNeighborGraph(g, "test").ok());
  for (int64_t i = 0; i < b.n; ++i) {
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t j = 0; j < b.n; ++j) {
      if (j == i) continue;
      double s = 0;
      for (int64_t a = 0; a < b.d; ++a) s += (double(b.x[i * b.d + a]) - b.x[j * b.d + a]) * (double(b.x[i * b.d + a]) - b.x[j * b.d + a]);
      all.emplace_back(std::sqrt(s), j);
    }
    std::sort(all.begin(), all.end());
    for (int64_t r = 0; r < 6; ++r) {
      EXPECT_EQ(g.indices[i * 6 + r], all[r].second) << "row " << i << " rank " << r;
      EXPECT_NEAR(g.distances[i * 6 + r], all[r].first, 1e-5);
    }
  }
}

TEST(ExactKnn, RejectsBadInput) {
  const Blobs b = MakeBlobs(5, 2, 3, 1.0, 2);
  auto s = ExactKnn(b.x, b.n, b.d, 10, {});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("k = 10"), std::string::npos) << s.status().message();
  auto bad = b.x;
  bad[7] = std::numeric_limits<float>::infinity();
  s = ExactKnn(bad, b.n, b.d, 3, {});
  EXPECT_NE(s.status().message().find("x[row 2, column 1]"), std::string::npos) << s.status().message();
}

TEST(ValidateNeighborGraph, NamesTheOffendingEntry) {
  NeighborGraph g{3, 1, {1, 2, 0}, {0.5f, 0.25f, 1.0f}};
  EXPECT_TRUE(ValidateNeighborGraph(g, "t").ok());
  g.indices[1] = 1;
  auto s = ValidateNeighborGraph(g, "t");
  EXPECT_NE(s.message().find("index[row 1, column 0] = 1"), std::string::npos) << s.message();
  g = {3, 2, {1, 2, 0, 2, 0, 1}, {0.5f, 0.25f, 1, 2, 1, 2}};
  s = ValidateNeighborGraph(g, "t");
  EXPECT_NE(s.message().find("distance[row 0, column 1] = 0.25"), std::string::npos) << s.message();
  g.distances[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ValidateNeighborGraph(g, "t").code(), StatusCode::kInvalidArgument);
  g = {3, 2, {1, 2}, {0.5f, 1}};
  s = ValidateNeighborGraph(g, "t");
  EXPECT_NE(s.message().find("expected n * k = 6"), std::string::npos) << s.message();
}

TEST(BarnesHutTsne, KeepsSeparatedBlobsApart) {
  const Blobs b = MakeBlobs(150, 4, 20, 4.0, 3);
  BarnesHutTsneOptions o;
  o.threads = 2;
  const auto r = BarnesHutTsne(Graph(b, 91), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->neighbors, 91);
  EXPECT_DOUBLE_EQ(r->learning_rate, 50.0);  // "auto": max(600 / 12 / 4, 50)
  EXPECT_GT(r->kl_divergence, 0.0);
  EXPECT_LT(r->kl_divergence, 2.0);
  EXPECT_GT(KnnAccuracy(r->y, b.label, 2), 0.98);
  TrustworthinessOptions t;
  t.threads = 2;
  EXPECT_GT(*Trustworthiness(b.x, b.n, b.d, r->y, 2, t), 0.9);
}

TEST(BarnesHutTsne, ApproximatesTheExactGradient) {
  // theta = 0 opens every cell: the exact O(n^2) t-SNE on the same P. The
  // default theta must reach nearly the same cost.
  const Blobs b = MakeBlobs(60, 3, 10, 3.0, 4);
  const auto g = Graph(b, 91);
  BarnesHutTsneOptions o;
  o.threads = 2;
  o.theta = 0;
  const auto exact = BarnesHutTsne(g, o);
  o.theta = 0.5;
  const auto approx = BarnesHutTsne(g, o);
  ASSERT_TRUE(exact.ok() && approx.ok());
  EXPECT_NEAR(approx->kl_divergence, exact->kl_divergence, 0.05 * exact->kl_divergence);
}

TEST(BarnesHutTsne, IsReproducibleAndIndependentOfTheThreadCount) {
  const Blobs b = MakeBlobs(100, 3, 10, 3.0, 5);
  const auto g = Graph(b, 40);
  BarnesHutTsneOptions o;
  o.perplexity = 13;
  o.iterations = 300;
  o.seed = 7;
  std::vector<std::vector<float>> runs;
  for (int threads : {2, 2, 1, 3}) {
    o.threads = threads;
    auto r = BarnesHutTsne(g, o);
    ASSERT_TRUE(r.ok());
    runs.push_back(r->y);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].size(), runs[0].size());
    EXPECT_EQ(std::memcmp(runs[i].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0) << "run " << i;
  }
  o.seed = 8;
  const auto other = BarnesHutTsne(g, o);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(std::memcmp(other->y.data(), runs[0].data(), runs[0].size() * sizeof(float)), 0);
}

TEST(BarnesHutTsne, StartsFromAGivenLayoutRescaledAsScikitLearn) {
  const Blobs b = MakeBlobs(50, 2, 5, 3.0, 6);
  const auto g = Graph(b, 40);
  BarnesHutTsneOptions o;
  o.perplexity = 10;
  o.iterations = 0;
  o.initial_layout.resize(b.n * 2);
  for (int64_t i = 0; i < b.n; ++i) {
    o.initial_layout[2 * i] = b.x[i * b.d];
    o.initial_layout[2 * i + 1] = b.x[i * b.d + 1];
  }
  const auto r = BarnesHutTsne(g, o);
  ASSERT_TRUE(r.ok());
  double mean = 0, var = 0;
  for (int64_t i = 0; i < b.n; ++i) mean += r->y[2 * i] / b.n;
  for (int64_t i = 0; i < b.n; ++i) var += (r->y[2 * i] - mean) * (r->y[2 * i] - mean) / b.n;
  EXPECT_NEAR(std::sqrt(var), 1e-4, 1e-8);
  // The two columns keep their ratio.
  EXPECT_NEAR(r->y[3] / r->y[1], o.initial_layout[3] / o.initial_layout[1], 1e-4);
  o.rescale_initial_layout = false;
  const auto raw = BarnesHutTsne(g, o);
  EXPECT_EQ(raw->y[0], o.initial_layout[0]);
}

TEST(BarnesHutTsne, StopsWithinAnIterationAndReportsProgress) {
  const Blobs b = MakeBlobs(500, 4, 10, 3.0, 7);
  const auto g = Graph(b, 91);
  BarnesHutTsneOptions o;
  o.threads = 2;
  int64_t last = 0, total = 0;
  o.on_progress = [&](int64_t done, int64_t all) { last = done, total = all; };
  std::atomic<int> polls{0};
  o.should_stop = [&] { return last >= 20; };
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = BarnesHutTsne(g, o);
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("iteration 20"), std::string::npos) << r.status().message();
  EXPECT_EQ(last, 20);
  EXPECT_EQ(total, 1000);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // A stop requested before anything starts also ends it.
  o.should_stop = [&] { return ++polls > 0; };
  EXPECT_EQ(BarnesHutTsne(g, o).status().code(), StatusCode::kAborted);
}

TEST(BarnesHutTsne, RejectsBadInputNamingTheValue) {
  const Blobs b = MakeBlobs(20, 2, 3, 3.0, 8);
  const auto g = Graph(b, 39);
  auto expect_invalid = [&](const BarnesHutTsneOptions& o, const NeighborGraph& graph, const std::string& needle) {
    const auto r = BarnesHutTsne(graph, o);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  BarnesHutTsneOptions o;
  o.perplexity = 5;  // needs 16 neighbours
  expect_invalid(o, Graph(b, 10), "k = 10");
  o.perplexity = -1;
  expect_invalid(o, g, "perplexity");
  o = {};
  o.theta = 1.5;
  expect_invalid(o, g, "theta must be in [0, 1], got 1.5");
  o = {};
  o.learning_rate = -3;
  expect_invalid(o, g, "learning_rate");
  o = {};
  o.threads = 0;
  expect_invalid(o, g, "threads must be >= 1, got 0");
  o = {};
  o.iterations = -1;
  expect_invalid(o, g, "iterations");
  o = {};
  o.initial_layout.assign(5, 0.0f);
  expect_invalid(o, g, "initial_layout has 5 values, expected 40 * 2");
  o.initial_layout.assign(80, 1.0f);
  expect_invalid(o, g, "column 0 is constant");
  o.initial_layout[9] = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(o, g, "initial_layout[row 4, column 1]");
  o = {};
  NeighborGraph bad = g;
  bad.distances[5] = -1;
  expect_invalid(o, bad, "distance[row 0, column 5] = -1");
  expect_invalid(o, NeighborGraph{1, 0, {}, {}}, "n = 1");
}

}  // namespace
}  // namespace scdino::eval
