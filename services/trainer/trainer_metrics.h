// The trainer's metrics (docs/metrics.md lists each with its type, unit and
// meaning), fed from the trainer's step and checkpoint reports.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <torch/torch.h>

#include "training/reports.h"

namespace scdino::metrics {

/// Families are created once here; the hot path touches cached children.
/// Thread-safe (prometheus-cpp metrics are atomic).
class TrainerMetrics {
 public:
  TrainerMetrics(prometheus::Registry& registry, torch::Device device);
  void OnStep(const training::StepReport& r);
  void OnCheckpoint(const training::CheckpointReport& r);
  /// The health signals and collapse verdict of a logging interval.
  void OnHealth(const training::HealthReport& h);
  /// A learning check (rank 0) and a rollback after a collapse.
  void OnLearning(const training::LearningReport& l);
  void OnRecovery(const training::RecoveryReport& r);

 private:
  torch::Device device_;
  prometheus::Counter *iterations_, *images_, *skipped_images_, *nonfinite_steps_;
  prometheus::Gauge *epoch_, *iteration_, *iterations_total_, *epochs_, *loss_, *lr_, *wd_, *momentum_, *teacher_temp_;
  prometheus::Gauge *last_checkpoint_, *gpu_allocated_ = nullptr, *gpu_reserved_ = nullptr, *gpu_peak_ = nullptr;
  prometheus::Gauge *teacher_entropy_, *teacher_entropy_ratio_, *kl_, *batch_entropy_, *center_norm_, *cls_std_;
  prometheus::Gauge *healthy_, *uniform_, *onehot_;
  prometheus::Gauge *knn_trained_, *knn_random_, *knn_pixels_, *learning_epoch_;
  prometheus::Gauge *learned_, *did_not_learn_, *cannot_tell_;
  prometheus::Counter* recoveries_;
  prometheus::Histogram *step_, *data_wait_, *allreduce_, *checkpoint_;
};

}  // namespace scdino::metrics
