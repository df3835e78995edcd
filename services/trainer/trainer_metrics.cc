#include "trainer/trainer_metrics.h"

#include "training/device_memory.h"

namespace scdino::metrics {

namespace {

prometheus::Counter* Counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildCounter().Name("scdino_trainer_" + name).Help(help).Register(r).Add({});
}
prometheus::Gauge* Gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildGauge().Name("scdino_trainer_" + name).Help(help).Register(r).Add({});
}
prometheus::Histogram* Histogram(prometheus::Registry& r, const std::string& name, const std::string& help,
                                 prometheus::Histogram::BucketBoundaries buckets) {
  return &prometheus::BuildHistogram().Name("scdino_trainer_" + name).Help(help).Register(r).Add({}, buckets);
}

// Seconds from 1 ms to about 2 minutes, doubling.
prometheus::Histogram::BucketBoundaries Doubling(double first, int n) {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i < n; ++i) b.push_back(first * static_cast<double>(1 << i));
  return b;
}

}  // namespace

TrainerMetrics::TrainerMetrics(prometheus::Registry& r, torch::Device device) : device_(device) {
  iterations_ = Counter(r, "iterations_total", "Training iterations done by this process (since it started)");
  images_ = Counter(r, "images_total", "Images this rank trained on");
  skipped_images_ = Counter(r, "skipped_images_total", "Bad images dropped from this rank's batches");
  nonfinite_steps_ = Counter(r, "nonfinite_steps_total", "Steps skipped for a non-finite loss");
  epoch_ = Gauge(r, "epoch", "Current epoch (0-based)");
  iteration_ = Gauge(r, "iteration", "Iterations done in the run, before a resume included");
  iterations_total_ = Gauge(r, "iterations_to_process", "Iterations of the whole run");
  epochs_ = Gauge(r, "epochs", "Epochs of the whole run");
  loss_ = Gauge(r, "loss", "DINO loss of the last step");
  lr_ = Gauge(r, "learning_rate", "Learning rate of the last step");
  wd_ = Gauge(r, "weight_decay", "Weight decay of the last step");
  momentum_ = Gauge(r, "teacher_momentum", "Teacher EMA momentum of the last step");
  teacher_temp_ = Gauge(r, "teacher_temperature", "Teacher softmax temperature of the current epoch");
  last_checkpoint_ = Gauge(r, "last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint written");
  step_ = Histogram(r, "step_duration_seconds", "Duration of a training iteration, data included", Doubling(0.001, 18));
  data_wait_ = Histogram(r, "data_wait_seconds", "Time an iteration waited for its batch", Doubling(0.0001, 20));
  allreduce_ = Histogram(r, "allreduce_wait_seconds",
                         "Time an iteration waited for gradient all-reduce after backward", Doubling(0.0001, 20));
  checkpoint_ = Histogram(r, "checkpoint_duration_seconds", "Time to write a checkpoint", Doubling(0.01, 16));
  teacher_entropy_ = Gauge(r, "teacher_entropy_nats",
                           "Mean entropy of the centred, sharpened teacher distribution over the last logging interval");
  teacher_entropy_ratio_ = Gauge(r, "teacher_entropy_ratio", "Teacher entropy over ln(out_dim): near 1 = uniform");
  kl_ = Gauge(r, "student_teacher_kl_nats", "KL divergence of the student from the teacher over the last logging interval");
  batch_entropy_ = Gauge(r, "teacher_batch_entropy_nats",
                         "Entropy of the batch-mean teacher distribution: near 0 = one-hot collapse");
  center_norm_ = Gauge(r, "center_norm", "L2 norm of the DINO loss's center");
  cls_std_ = Gauge(r, "backbone_cls_std", "Mean per-dimension batch std of the normalised teacher CLS features");
  auto& collapse = prometheus::BuildGauge()
                       .Name("scdino_trainer_collapse")
                       .Help("1 for the current collapse verdict (healthy, uniform_collapse, onehot_collapse); all 0 "
                             "before the first verdict (second epoch)")
                       .Register(r);
  healthy_ = &collapse.Add({{"verdict", "healthy"}});
  uniform_ = &collapse.Add({{"verdict", "uniform_collapse"}});
  onehot_ = &collapse.Add({{"verdict", "onehot_collapse"}});
  auto& knn = prometheus::BuildGauge()
                  .Name("scdino_trainer_knn_top1_ratio")
                  .Help("Weighted 20-NN top-1 accuracy on held-out images at the last learning check: of the teacher "
                        "(model=trained), of a random ViT of the same shape (model=random_init) and of the raw "
                        "pixels (model=raw_pixels)")
                  .Register(r);
  knn_trained_ = &knn.Add({{"model", "trained"}});
  knn_random_ = &knn.Add({{"model", "random_init"}});
  knn_pixels_ = &knn.Add({{"model", "raw_pixels"}});
  auto& learned = prometheus::BuildGauge()
                      .Name("scdino_trainer_learned")
                      .Help("1 for the verdict of the last learning check (learned: above a random ViT and the raw "
                            "pixels by more than scdino.learning_margin; did_not_learn; cannot_tell: a baseline "
                            "classifies every held-out image); all 0 before the first")
                      .Register(r);
  learned_ = &learned.Add({{"verdict", "learned"}});
  did_not_learn_ = &learned.Add({{"verdict", "did_not_learn"}});
  cannot_tell_ = &learned.Add({{"verdict", "cannot_tell"}});
  learning_epoch_ = Gauge(r, "learning_check_epoch", "Epochs done at the last learning check; 0 before the first");
  recoveries_ = &prometheus::BuildCounter()
                     .Name("scdino_trainer_recoveries_total")
                     .Help("Rollbacks to the last healthy checkpoint after a collapse (scdino.on_collapse: recover)")
                     .Register(r)
                     .Add({});
  if (device.is_cuda()) {
    gpu_allocated_ = Gauge(r, "gpu_memory_allocated_bytes", "GPU memory held by tensors (CUDA caching allocator)");
    gpu_reserved_ = Gauge(r, "gpu_memory_reserved_bytes", "GPU memory reserved by the CUDA caching allocator");
    gpu_peak_ = Gauge(r, "gpu_memory_peak_bytes", "Peak GPU memory held by tensors since the process began");
  }
}

void TrainerMetrics::OnHealth(const training::HealthReport& h) {
  teacher_entropy_->Set(h.health.teacher_entropy);
  teacher_entropy_ratio_->Set(h.health.teacher_entropy_ratio);
  kl_->Set(h.health.student_teacher_kl);
  batch_entropy_->Set(h.health.teacher_batch_entropy);
  center_norm_->Set(h.health.center_norm);
  cls_std_->Set(h.health.backbone_cls_std);
  healthy_->Set(h.collapse == "healthy" ? 1 : 0);
  uniform_->Set(h.collapse == "uniform_collapse" ? 1 : 0);
  onehot_->Set(h.collapse == "onehot_collapse" ? 1 : 0);
}

void TrainerMetrics::OnLearning(const training::LearningReport& l) {
  knn_trained_->Set(l.trained_top1);
  knn_random_->Set(l.random_top1);
  knn_pixels_->Set(l.pixels_top1);
  const auto v = l.verdict().learned;
  using scdino::Learned;
  learned_->Set(v == Learned::kYes ? 1 : 0);
  did_not_learn_->Set(v == Learned::kNo ? 1 : 0);
  cannot_tell_->Set(v == Learned::kCannotTell ? 1 : 0);
  learning_epoch_->Set(static_cast<double>(l.epoch));
}

void TrainerMetrics::OnRecovery(const training::RecoveryReport&) { recoveries_->Increment(); }

void TrainerMetrics::OnStep(const training::StepReport& s) {
  iterations_->Increment();
  images_->Increment(static_cast<double>(s.images));
  if (s.skipped_images > 0) skipped_images_->Increment(static_cast<double>(s.skipped_images));
  if (!s.finite) nonfinite_steps_->Increment();
  epoch_->Set(static_cast<double>(s.epoch));
  iteration_->Set(static_cast<double>(s.iteration));
  iterations_total_->Set(static_cast<double>(s.iterations_to_process));
  epochs_->Set(static_cast<double>(s.epochs_to_process));
  if (s.finite) loss_->Set(s.loss);
  lr_->Set(s.lr);
  wd_->Set(s.weight_decay);
  momentum_->Set(s.momentum);
  teacher_temp_->Set(s.teacher_temp);
  step_->Observe(s.step_seconds);
  data_wait_->Observe(s.data_wait_seconds);
  allreduce_->Observe(s.allreduce_wait_seconds);
  if (gpu_allocated_) {
    if (auto m = training::QueryDeviceMemory(device_)) {
      gpu_allocated_->Set(static_cast<double>(m->allocated_bytes));
      gpu_reserved_->Set(static_cast<double>(m->reserved_bytes));
      gpu_peak_->Set(static_cast<double>(m->peak_allocated_bytes));
    }
  }
}

void TrainerMetrics::OnCheckpoint(const training::CheckpointReport& r) {
  checkpoint_->Observe(r.seconds);
  last_checkpoint_->Set(static_cast<double>(r.unix_ms) / 1000.0);
}

}  // namespace scdino::metrics
