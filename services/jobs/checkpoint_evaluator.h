// scdino-eval's job at the config's edge (jobs/): its work for one feature
// set after another, as the run's config says: kNN, metrics, embeddings (RunEvaluation), attention maps, the kNN
// table on stdout, and the per-checkpoint table
// (eval/knn_per_checkpoint.csv) that grows with every set, and the run's
// report (eval/report.html). The same for a
// list of feature directories and for scdino-eval --follow, which hands it
// each new checkpoint's features while the trainer runs.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "eval/evaluation.h"
#include "features/feature_set.h"
#include "run/run_control.h"

namespace scdino::jobs {

using eval::CheckpointRow;
using eval::EvalOptions;

struct EvaluatorOptions {
  torch::Device device = torch::kCPU;
  int threads = 1;
  bool attention = true;
  RunControl* control = nullptr;
  std::function<bool()> stop_signal;
  std::function<void(int64_t done, int64_t total)> on_progress;
  /// After each set: its row (the service reports it as metrics).
  std::function<void(const CheckpointRow&)> on_evaluated;
  std::ostream* log = nullptr;  ///< progress and warnings
  std::ostream* out = nullptr;  ///< the kNN table of each set
};

/// Thread-compatible.
class CheckpointEvaluator {
 public:
  CheckpointEvaluator(const run::RunConfig& config, EvaluatorOptions options);

  /// The EvalOptions of a set named `name` (eval/<name>/).
  EvalOptions OptionsFor(const std::string& name) const;
  /// Evaluates one set and adds its row. Aborted when a stop ended it (its
  /// completed outputs stay); attention maps that cannot be drawn are a
  /// warning, not an error.
  Status Evaluate(const features::FeatureSet& set);
  const std::vector<CheckpointRow>& rows() const { return rows_; }
  /// Writes the rows to <run_dir>/eval/knn_per_checkpoint.csv (atomically)
  /// and returns its path.
  StatusOr<std::string> WriteTable() const;
  /// Rewrites <run_dir>/eval/report.html (eval/report.h) and returns its path.
  StatusOr<std::string> WriteReport() const;

 private:
  const run::RunConfig& config_;
  EvaluatorOptions o_;
  std::vector<CheckpointRow> rows_;
};

}  // namespace scdino::jobs
