#include "metrics/eval_metrics.h"

namespace scdino::metrics {

EvalMetrics::EvalMetrics(prometheus::Registry& registry) {
  top1_ = &prometheus::BuildGauge()
               .Name("scdino_eval_knn_top1_ratio")
               .Help("weighted kNN top-1 accuracy of a checkpoint's features (0..1)")
               .Register(registry);
  balanced_ = &prometheus::BuildGauge()
                   .Name("scdino_eval_knn_balanced_accuracy_ratio")
                   .Help("weighted kNN balanced accuracy (mean per-class recall) of a checkpoint's features (0..1)")
                   .Register(registry);
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(registry);
  };
  linear_top1_ = gauge("scdino_eval_linear_probe_top1_ratio", "linear probe top-1 accuracy of a checkpoint's features");
  linear_balanced_ = gauge("scdino_eval_linear_probe_balanced_accuracy_ratio",
                           "linear probe balanced accuracy (mean per-class recall) of a checkpoint's features");
  ari_ = gauge("scdino_eval_kmeans_adjusted_rand_index_ratio",
               "adjusted Rand index of k-means (k = classes) of the test rows against their classes");
  nmi_ = gauge("scdino_eval_kmeans_nmi_ratio",
               "normalised mutual information of k-means (k = classes) of the test rows and their classes");
  evaluated_ = &prometheus::BuildCounter()
                    .Name("scdino_eval_checkpoints_evaluated_total")
                    .Help("feature sets (checkpoints) this process has evaluated")
                    .Register(registry)
                    .Add({});
}

void EvalMetrics::ReportKnn(const std::string& checkpoint, int64_t epoch, int64_t k, double top1,
                            double balanced_accuracy) {
  const prometheus::Labels labels = {
      {"checkpoint", checkpoint}, {"epoch", epoch < 0 ? "none" : std::to_string(epoch)}, {"k", std::to_string(k)}};
  top1_->Add(labels).Set(top1);
  balanced_->Add(labels).Set(balanced_accuracy);
}

void EvalMetrics::ReportLinearProbe(const std::string& checkpoint, int64_t epoch, double top1,
                                    double balanced_accuracy) {
  const prometheus::Labels labels = {{"checkpoint", checkpoint}, {"epoch", epoch < 0 ? "none" : std::to_string(epoch)}};
  linear_top1_->Add(labels).Set(top1);
  linear_balanced_->Add(labels).Set(balanced_accuracy);
}

void EvalMetrics::ReportClustering(const std::string& checkpoint, int64_t epoch, double ari, double nmi) {
  const prometheus::Labels labels = {{"checkpoint", checkpoint}, {"epoch", epoch < 0 ? "none" : std::to_string(epoch)}};
  ari_->Add(labels).Set(ari);
  nmi_->Add(labels).Set(nmi);
}

void EvalMetrics::CheckpointEvaluated() { evaluated_->Increment(); }

}  // namespace scdino::metrics
