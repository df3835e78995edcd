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

void EvalMetrics::CheckpointEvaluated() { evaluated_->Increment(); }

}  // namespace scdino::metrics
