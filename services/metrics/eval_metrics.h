// What scdino-eval reports per evaluated checkpoint, so the training
// dashboard shows kNN accuracy against epoch (docs/metrics.md):
// scdino_eval_knn_top1_ratio{checkpoint,epoch,k},
// scdino_eval_knn_balanced_accuracy_ratio{checkpoint,epoch,k}, the linear
// probe's scdino_eval_linear_probe_{top1,balanced_accuracy}_ratio and
// k-means' scdino_eval_kmeans_{adjusted_rand_index,nmi}_ratio
// {checkpoint,epoch}, and scdino_eval_checkpoints_evaluated_total.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <string>

namespace scdino::metrics {

/// Thread-safe (prometheus-cpp families are).
class EvalMetrics {
 public:
  explicit EvalMetrics(prometheus::Registry& registry);
  /// One k of one checkpoint; `epoch` < 0 (random init, converted weights)
  /// is exported as the label "none".
  void ReportKnn(const std::string& checkpoint, int64_t epoch, int64_t k, double top1, double balanced_accuracy);
  /// The linear probe's accuracies of one checkpoint.
  void ReportLinearProbe(const std::string& checkpoint, int64_t epoch, double top1, double balanced_accuracy);
  /// k-means of one checkpoint's test rows against the classes.
  void ReportClustering(const std::string& checkpoint, int64_t epoch, double ari, double nmi);
  /// Once per checkpoint, after all its k.
  void CheckpointEvaluated();

 private:
  prometheus::Family<prometheus::Gauge>* top1_;
  prometheus::Family<prometheus::Gauge>* balanced_;
  prometheus::Family<prometheus::Gauge>* linear_top1_;
  prometheus::Family<prometheus::Gauge>* linear_balanced_;
  prometheus::Family<prometheus::Gauge>* ari_;
  prometheus::Family<prometheus::Gauge>* nmi_;
  prometheus::Counter* evaluated_;
};

}  // namespace scdino::metrics
