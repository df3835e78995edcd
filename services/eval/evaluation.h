// scdino-eval's work on one features directory: weighted kNN of the test
// rows against the train rows for every k, the classification metrics of
// each, and the results as JSON and CSV; the confusion matrix and the 2-D
// embeddings (PCA, t-SNE, UMAP; eval/embedding_figures.h) of the test rows;
// attention maps of the backbone (eval/attention_maps.h). docs/eval.md
// lists every file.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "run/run_control.h"
#include "common/status.h"
#include "eval/classification_metrics.h"
#include "eval/embedding_figures.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "features/feature_set.h"

namespace scdino::eval {

struct EvalOptions {
  /// Where results go (created).
  std::string out_dir;
  std::vector<int64_t> ks{10, 20, 100, 200};
  double temperature = 0.07;
  int64_t knn_memory_bytes = int64_t{512} << 20;
  torch::Device device = torch::kCPU;
  /// PCA, t-SNE and UMAP of the test rows (seed, threads, stop and log are
  /// taken from these options).
  EmbeddingOptions embeddings;
  uint64_t seed = 0;
  bool linear_probe = true;   ///< scdino.evaluation.linear_probe
  std::vector<double> linear_probe_c{0.01, 0.1, 1, 10, 100, 1000};
  bool kmeans = true;         ///< scdino.evaluation.kmeans
  int64_t kmeans_restarts = 10;
  /// Rank 0's control channel (pause, resume, stop between query chunks).
  RunControl* control = nullptr;
  std::function<bool()> stop_signal;
  /// Queries done of the total.
  std::function<void(int64_t done, int64_t total)> on_progress;
  std::ostream* log = nullptr;
};

/// The kNN result of one k.
struct KnnScore {
  int64_t k = 0, k_used = 0;
  /// top5 is meaningful only with more than 5 classes (with 5 or fewer every
  /// query's true class is among its top 5): top5_applies says which.
  double top1 = 0, top5 = 0;
  bool top5_applies = true;
  ClassificationReport report;
};

/// The linear probe's scores on the test rows (eval/linear_probe.h).
struct LinearProbeScore {
  bool done = false;
  std::string skipped;  ///< why not, when not done
  double c = 0;
  std::vector<double> grid, validation;
  int64_t n_validation = 0, iterations = 0;
  double top1 = 0;
  ClassificationReport report;
};

/// k-means of the test rows against their classes (eval/clustering.h).
struct ClusteringScore {
  bool done = false;
  std::string skipped;
  int64_t k = 0;
  double ari = 0, nmi = 0, inertia = 0;
  std::vector<int64_t> assignment;  ///< per test row, in feature-set order
};

struct EvalResult {
  bool completed = false;  ///< false: stopped through the control API or a signal
  int64_t n_train = 0, n_test = 0;
  std::vector<KnnScore> scores;  ///< per k, in the order of EvalOptions::ks
  size_t best = 0;               ///< index of the k with the best top-1 accuracy
  std::vector<std::string> files;  ///< written, relative to out_dir
  nlohmann::json embeddings;       ///< EmbeddingResult::summary
  LinearProbeScore linear;
  ClusteringScore clustering;
};

/// kNN, metrics, results files, confusion matrix and embedding plots.
StatusOr<EvalResult> RunEvaluation(const features::FeatureSet& set, const EvalOptions& options);

/// The backbone and preprocessing recorded in a features directory's
/// metadata.json (random_init: re-created from its seed).
StatusOr<features::Backbone> BackboneOf(const features::FeatureSet& set, uint64_t seed, torch::Device device);
StatusOr<features::FeaturePrep> PrepOf(const features::FeatureSet& set);

/// One row per (features directory, k): the kNN accuracy of every
/// checkpoint, oldest first, as CSV.
struct CheckpointRow {
  std::string name;
  int64_t epoch = -1, iteration = -1;
  EvalResult result;
};
std::string CheckpointTableCsv(const std::vector<CheckpointRow>& rows);
/// One row per features directory: the linear probe (top-1, balanced
/// accuracy, macro F1, C) and k-means (ARI, NMI); empty fields where skipped.
std::string ProbeTableCsv(const std::vector<CheckpointRow>& rows);

}  // namespace scdino::eval
