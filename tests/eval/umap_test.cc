// UMAP and its spectral initialisation: known curve parameters, known
// eigenvectors, separated clusters, disconnected graphs, reproducibility,
// stop requests and the umap_eval options' validation.
#include "eval/umap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "eval/neighbor_graph.h"
#include "eval/spectral.h"
#include "eval/trustworthiness.h"
#include "support/blobs.h"

namespace scdino::eval {
namespace {

using scdino::testing::Blobs;
using scdino::testing::Graph;
using scdino::testing::MakeBlobs;

constexpr double kPi = 3.14159265358979323846;

// Smallest distance between points of different labels over the largest
// distance between points of one label: > 1 means separated.
double SeparationRatio(const std::vector<float>& y, const std::vector<int>& label) {
  double between = 1e300, within = 0;
  const size_t n = label.size();
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double d = std::hypot(y[2 * i] - y[2 * j], y[2 * i + 1] - y[2 * j + 1]);
      if (label[i] == label[j]) within = std::max(within, d);
      else between = std::min(between, d);
    }
  }
  return between / within;
}

TEST(FitUmapCurve, MatchesScipyCurveFit) {
  // scipy.optimize.curve_fit on the same 300 points (scipy 1.10).
  struct Case { double spread, min_dist, a, b; };
  for (const Case& c : {Case{1.0, 0.1, 1.57694346, 0.89506088}, Case{1.1, 0.4, 0.67354183, 1.18230817},
                        Case{1.0, 0.0, 1.9328084, 0.79049497}}) {
    const auto ab = FitUmapCurve(c.spread, c.min_dist);
    ASSERT_TRUE(ab.ok());
    EXPECT_NEAR(ab->first, c.a, 1e-5 * c.a) << c.spread << " " << c.min_dist;
    EXPECT_NEAR(ab->second, c.b, 1e-5 * c.b);
  }
  EXPECT_EQ(FitUmapCurve(1.0, 1.5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FitUmapCurve(0.0, 0.0).status().code(), StatusCode::kInvalidArgument);
}

TEST(SpectralLayout, PutsACycleOnACircle) {
  // The normalised adjacency of a cycle has the degenerate pair cos, sin of
  // the angle as leading non-trivial eigenvectors: any basis of that plane
  // puts the points on a circle, in cyclic order.
  const int64_t n = 400;
  SparseGraph w;
  w.offsets.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> nb = {int32_t((i + n - 1) % n), int32_t((i + 1) % n)};
    std::sort(nb.begin(), nb.end());
    for (int32_t j : nb) w.cols.push_back(j), w.vals.push_back(1.0f);
    w.offsets.push_back(static_cast<int64_t>(w.cols.size()));
  }
  detail::WorkerPool pool(2);
  SpectralOptions o;
  o.tolerance = 1e-8;  // the pair is well separated from the next only by 4e-4
  const auto r = SpectralLayout(w, o, pool);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->converged) << r->note;
  EXPECT_EQ(r->components, 1);
  double rmin = 1e300, rmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double rad = std::hypot(r->layout[2 * i], r->layout[2 * i + 1]);
    rmin = std::min(rmin, rad), rmax = std::max(rmax, rad);
  }
  EXPECT_NEAR(rmax, std::sqrt(2.0 / n), 1e-4 * std::sqrt(2.0 / n));
  EXPECT_GT(rmin / rmax, 0.9999);
  // Neighbours on the cycle stay neighbours: consecutive angles differ by 2 pi / n.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i + 1) % n;
    double da = std::atan2(r->layout[2 * j + 1], r->layout[2 * j]) - std::atan2(r->layout[2 * i + 1], r->layout[2 * i]);
    da = std::abs(std::remainder(da, 2 * kPi));
    EXPECT_NEAR(da, 2 * kPi / n, 1e-3) << i;
  }
}

TEST(Umap, LaysOutDisconnectedComponentsApart) {
  // Two blobs far apart with few neighbours: two components.
  const Blobs b = MakeBlobs(60, 2, 5, 50.0, 11);
  UmapOptions o;
  o.n_neighbors = 6;
  o.epochs = 50;
  const auto r = Umap(Graph(b, 5), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->components, 2);
  EXPECT_EQ(r->init, "spectral");
  EXPECT_NE(r->init_note.find("2 connected components"), std::string::npos) << r->init_note;
  // Each point's nearest embedded neighbour comes from its own blob.
  for (int64_t i = 0; i < b.n; ++i) {
    int64_t best = -1;
    double bd = 1e300;
    for (int64_t j = 0; j < b.n; ++j) {
      const double dd = std::hypot(r->embedding[2 * i] - r->embedding[2 * j], r->embedding[2 * i + 1] - r->embedding[2 * j + 1]);
      if (j != i && dd < bd) bd = dd, best = j;
    }
    EXPECT_EQ(b.label[best], b.label[i]) << i;
  }
}

TEST(Umap, FallsBackWithAReasonWhenTheSolverDoesNotConverge) {
  const Blobs b = MakeBlobs(200, 2, 5, 1.0, 17);
  UmapOptions o;
  o.n_neighbors = 10;
  o.epochs = 20;  // after a first round of 48 steps: 48 > 3, and 1e-14 is out of reach
  o.spectral_tolerance = 1e-14;
  o.spectral_max_matvecs = 3;
  auto r = Umap(Graph(b, 9), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->init, "fallback: random");
  EXPECT_NE(r->init_note.find("did not converge"), std::string::npos) << r->init_note;
  o.initial_layout.assign(b.n * 2, 0.0f);
  for (int64_t i = 0; i < b.n; ++i) o.initial_layout[2 * i] = b.x[i * b.d], o.initial_layout[2 * i + 1] = b.x[i * b.d + 1];
  r = Umap(Graph(b, 9), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->init, "fallback: given");
}

TEST(Umap, SeparatesBlobsAndKeepsNeighbourhoods) {
  const Blobs b = MakeBlobs(150, 4, 20, 4.0, 12);
  UmapOptions o;
  o.threads = 2;
  const auto r = Umap(Graph(b, 29), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->init, "spectral") << r->init_note;
  EXPECT_EQ(r->epochs, 100);
  EXPECT_GT(SeparationRatio(r->embedding, b.label), 1.0);
  TrustworthinessOptions t;
  t.threads = 2;
  EXPECT_GT(*Trustworthiness(b.x, b.n, b.d, r->embedding, 2, t), 0.9);
}

TEST(Umap, IsReproducibleAndIndependentOfTheThreadCount) {
  const Blobs b = MakeBlobs(100, 3, 10, 3.0, 13);
  const auto g = Graph(b, 14);
  UmapOptions o;
  o.n_neighbors = 15;
  o.seed = 3;
  std::vector<std::vector<float>> runs;
  for (int threads : {2, 2, 1, 3}) {
    o.threads = threads;
    auto r = Umap(g, o);
    ASSERT_TRUE(r.ok());
    runs.push_back(r->embedding);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_EQ(std::memcmp(runs[i].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0) << "run " << i;
  }
  o.seed = 4;
  const auto other = Umap(g, o);
  EXPECT_NE(std::memcmp(other->embedding.data(), runs[0].data(), runs[0].size() * sizeof(float)), 0);
}

TEST(Umap, HonoursInitEpochsAndComponents) {
  const Blobs b = MakeBlobs(40, 2, 4, 5.0, 14);
  const auto g = Graph(b, 10);
  UmapOptions o;
  o.n_neighbors = 8;
  o.n_components = 3;
  o.epochs = 0;  // UMAP's default for n <= 10000
  o.init = "random";
  auto r = Umap(g, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->epochs, 500);
  EXPECT_EQ(r->init, "random");
  EXPECT_EQ(r->embedding.size(), size_t(b.n * 3));
  o.epochs = 20;
  o.init = "given";
  o.initial_layout.assign(b.n * 3, 0.0f);
  for (int64_t i = 0; i < b.n * 3; ++i) o.initial_layout[i] = b.x[i];
  r = Umap(g, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->init, "given");
  o.metric = "cosine";
  EXPECT_TRUE(Umap(g, o).ok());
}

TEST(Umap, StopsWithinAnEpochAndReportsProgress) {
  const Blobs b = MakeBlobs(500, 4, 10, 3.0, 15);
  const auto g = Graph(b, 29);
  UmapOptions o;
  o.threads = 2;
  o.epochs = 400;
  int64_t last = 0, total = 0;
  o.on_progress = [&](int64_t done, int64_t all) { last = done, total = all; };
  o.should_stop = [&] { return last >= 7; };
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = Umap(g, o);
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("epoch 7"), std::string::npos) << r.status().message();
  EXPECT_EQ(total, 400);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  o.should_stop = [] { return true; };
  EXPECT_EQ(Umap(g, o).status().code(), StatusCode::kAborted);
}

TEST(Umap, RejectsBadOptionsNamingThem) {
  const Blobs b = MakeBlobs(20, 2, 3, 3.0, 16);
  const auto g = Graph(b, 9);
  auto expect_invalid = [&](const UmapOptions& o, const std::string& needle) {
    const auto r = Umap(g, o);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  UmapOptions o;  // n_neighbors 30 needs 29 neighbours, the graph has 9
  expect_invalid(o, "k = 9");
  o.n_neighbors = 10;
  o.metric = "manhattan";
  expect_invalid(o, "metric \"manhattan\"");
  o.metric = "euclidean";
  o.min_dist = 2;
  expect_invalid(o, "min_dist must be in [0, spread = 1.1], got 2");
  o.min_dist = 0.4;
  o.spread = -1;
  expect_invalid(o, "spread");
  o.spread = 1.1;
  o.n_components = 0;
  expect_invalid(o, "n_components");
  o.n_components = 2;
  o.epochs = -5;
  expect_invalid(o, "epochs must be >= 0, got -5");
  o.epochs = 10;
  o.n_neighbors = 1;
  expect_invalid(o, "n_neighbors must be >= 2, got 1");
  o.n_neighbors = 10;
  o.init = "pca";
  expect_invalid(o, "init \"pca\"");
  o.init = "given";
  expect_invalid(o, "initial_layout");
  o.initial_layout.assign(7, 0.0f);
  expect_invalid(o, "initial_layout has 7 values, expected 40 * 2");
  o.init = "spectral";
  o.initial_layout.clear();
  o.threads = 0;
  expect_invalid(o, "threads");
  o.threads = 1;
  o.spectral_max_matvecs = 0;
  expect_invalid(o, "spectral_max_matvecs");
}

}  // namespace
}  // namespace scdino::eval
