// Weighted k-nearest-neighbour classification of DINO and scDINO: cosine
// similarity between L2-normalised features, the k most similar training
// rows vote for their class with weight exp(similarity / T), classes ranked
// by their votes (ties: lower class index first). One top-k over the largest
// k serves every k. Queries go in chunks sized so the chunk x n_train
// similarity matrix fits a memory budget, on the device of the features.
// Functions of their arguments; thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "common/status.h"
#include "eval/neighbor_graph.h"

namespace scdino::eval {

struct KnnOptions {
  /// Neighbour counts to evaluate (DINO: 10, 20, 100, 200); a k above the
  /// training rows uses them all (KnnResult::k_used says so).
  std::vector<int64_t> ks{10, 20, 100, 200};
  /// Vote temperature T.
  double temperature = 0.07;
  /// Bytes for one chunk's similarity matrix (float32, chunk x n_train).
  int64_t memory_bytes = int64_t{512} << 20;
  /// Ranked classes kept per query (top-5 accuracy needs 5).
  int64_t ranks = 5;
  /// Called after every chunk with queries done and total; false stops.
  std::function<bool(int64_t done, int64_t total)> on_chunk;
};

struct KnnResult {
  bool completed = false;             ///< false: on_chunk asked to stop
  std::vector<int64_t> k_used;        ///< per options.ks
  /// Per k: [n_test, min(ranks, classes)] int64 class indices, best first.
  std::vector<torch::Tensor> ranked;
  int64_t chunk = 0;                  ///< queries per chunk
};

/// The k nearest rows (Euclidean) of every row of x [n, d] (any device),
/// itself excluded: the graph t-SNE and UMAP start from. Blocks of rows are
/// compared with all rows by one matrix product each, sized to
/// `memory_bytes`, and cut to their k smallest: no n x n matrix exists.
/// `should_stop` is polled between blocks (Aborted); `on_progress` hears
/// the rows done of n after each. InvalidArgument unless x is 2-D with
/// n >= 2 and 1 <= k <= n - 1.
StatusOr<NeighborGraph> NearestNeighborGraph(const torch::Tensor& x, int64_t k, int64_t memory_bytes,
                                             const std::function<bool()>& should_stop = {},
                                             const std::function<void(int64_t, int64_t)>& on_progress = {});

/// train: [n, d], train_labels: [n] int64 in [0, classes), test: [q, d], on
/// one device. Throws c10::Error naming the shape or value that is wrong.
KnnResult WeightedKnn(const torch::Tensor& train, const torch::Tensor& train_labels, const torch::Tensor& test,
                      int64_t classes, const KnnOptions& options);

}  // namespace scdino::eval
