// Clustered points for the embedding tests (t-SNE, UMAP, trustworthiness):
// Gaussian blobs, their exact neighbour graph, and how well a 2-D layout
// keeps the clusters (the labels of each point's nearest neighbours).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "eval/neighbor_graph.h"

namespace scdino::testing {

struct Blobs {
  int64_t n = 0, d = 0;
  std::vector<float> x;
  std::vector<int> label;
};

/// `clusters` Gaussian blobs of unit spread around centres ~N(0, sep^2).
inline Blobs MakeBlobs(int64_t per, int clusters, int64_t d, double sep, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  std::vector<double> centre(static_cast<size_t>(clusters * d));
  for (auto& c : centre) c = sep * g(rng);
  Blobs b;
  b.n = per * clusters;
  b.d = d;
  for (int64_t i = 0; i < b.n; ++i) {
    const int c = static_cast<int>(i % clusters);
    b.label.push_back(c);
    for (int64_t a = 0; a < d; ++a) b.x.push_back(static_cast<float>(centre[static_cast<size_t>(c * d + a)] + g(rng)));
  }
  return b;
}

/// The exact k-nearest-neighbour graph of the blobs.
inline eval::NeighborGraph Graph(const Blobs& b, int64_t k) {
  eval::ExactKnnOptions o;
  o.threads = 2;
  auto g = eval::ExactKnn(b.x, b.n, b.d, k, o);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : eval::NeighborGraph{};
}

/// Share of points whose 10 nearest embedded neighbours vote for their label.
inline double KnnAccuracy(const std::vector<float>& y, const std::vector<int>& label, int64_t dim) {
  const int64_t n = static_cast<int64_t>(label.size());
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::pair<double, int64_t>> d;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double s = 0;
      for (int64_t a = 0; a < dim; ++a) s += (y[i * dim + a] - y[j * dim + a]) * (y[i * dim + a] - y[j * dim + a]);
      d.emplace_back(s, j);
    }
    std::partial_sort(d.begin(), d.begin() + 10, d.end());
    std::vector<int> votes(*std::max_element(label.begin(), label.end()) + 1, 0);
    for (int r = 0; r < 10; ++r) ++votes[label[d[r].second]];
    right += std::max_element(votes.begin(), votes.end()) - votes.begin() == label[i];
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

}  // namespace scdino::testing
