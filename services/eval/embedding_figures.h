// The 2-D embeddings of an evaluation: PCA, Barnes-Hut t-SNE and UMAP of the
// test rows of a features directory, each measured by its trustworthiness,
// drawn (pca.png, tsne.png, umap.png, umap_kmeans.png) and written as coordinates
// (embeddings.csv, and embeddings.h5ad whose obsm holds X_pca, X_tsne and
// X_umap, so scanpy plots them as they are). One neighbour graph (LibTorch,
// blocked) serves both t-SNE and UMAP. Every long loop polls the stop
// request. Reentrant; the work itself runs on `threads` threads.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "eval/umap.h"
#include "features/feature_set.h"

namespace scdino::eval {

struct EmbeddingOptions {
  /// Rows embedded: every test row (0), or a class-stratified seeded
  /// subsample of at most this many.
  int64_t max_points = 0;
  bool tsne = true;
  double tsne_perplexity = 30;
  int64_t tsne_iterations = 1000;
  bool umap = true;
  /// UMAP's settings: scDINO's downstream_analyses.umap_eval (neighbours,
  /// min_dist, components, metric, spread, epochs) and UMAP's own. The
  /// seed, threads, stop and progress are set from these options' own, and
  /// n_neighbors is capped at the rows embedded.
  UmapOptions umap_options;
  /// Trustworthiness(k) of each embedding, on a stratified subsample of at
  /// most `trustworthiness_points` of the embedded rows (the exact measure
  /// costs O(n^2 d)); 0: every embedded row.
  int64_t trustworthiness_k = 10;
  int64_t trustworthiness_points = 5000;
  int64_t knn_memory_bytes = int64_t{512} << 20;
  int threads = 1;
  uint64_t seed = 0;
  /// k-means cluster of each feature-set row (-1: none), written as
  /// obs['kmeans'] of the .h5ad and drawn as <view>_kmeans.png (the last
  /// view, UMAP when drawn, coloured by cluster); empty: neither.
  std::vector<int64_t> kmeans;
  /// True once the service should stop: the current step ends with Aborted.
  std::function<bool()> should_stop;
  std::ostream* log = nullptr;
};

struct EmbeddingResult {
  std::vector<std::string> files;  ///< written, relative to the output directory
  /// {"rows": n, "pca": {"trustworthiness": t, "seconds": s, ...}, ...}
  nlohmann::json summary;
};

/// Embeds `rows` (indices into the feature set, e.g. the test rows) and
/// writes the figures and coordinates into `out_dir`. Aborted when stopped.
StatusOr<EmbeddingResult> WriteEmbeddings(const features::FeatureSet& set, const std::vector<int64_t>& rows,
                                          const EmbeddingOptions& options, const std::string& out_dir);

/// A class-stratified seeded subsample of at most `limit` of `rows` (all of
/// them when limit is 0 or not smaller), sorted.
std::vector<int64_t> StratifiedSubsample(const std::vector<int64_t>& rows, const std::vector<int64_t>& labels,
                                         int64_t limit, uint64_t seed);

}  // namespace scdino::eval
