#include "training/status_reporter.h"

namespace scdino::training {

void StatusReporter::Update(const std::function<void(RunStatus&)>& change) {
  if (control_) control_->Update(change);
}

void StatusReporter::Start(int64_t iteration, int64_t niter, int64_t epochs, int64_t images_per_iteration) {
  niter_ = niter;
  epochs_ = epochs;
  images_per_iteration_ = images_per_iteration;
  Update([&](RunStatus& st) {
    st.state = RunState::kRunning;
    st.epochs = epochs;
    st.iterations = epochs * niter;
    st.iteration = iteration;
    st.epoch = std::min(iteration / niter, epochs - 1);
    st.items_total = epochs * niter * images_per_iteration;
    st.items_done = iteration * images_per_iteration;
  });
}

void StatusReporter::Step(const StepReport& r, int64_t nonfinite_steps) {
  if (r.step_seconds > 0) rate_ = rate_ == 0.0 ? 1.0 / r.step_seconds : 0.9 * rate_ + 0.1 / r.step_seconds;
  const int64_t total = epochs_ * niter_;
  Update([&](RunStatus& st) {
    st.iteration = r.iteration;
    st.epoch = std::min(r.iteration / niter_, epochs_ - 1);
    st.items_done = r.iteration * images_per_iteration_;
    st.items_per_second = rate_ * static_cast<double>(images_per_iteration_);
    st.eta_seconds = rate_ > 0 ? static_cast<double>(total - r.iteration) / rate_ : 0.0;
    st.trainer.loss = r.loss;
    st.trainer.learning_rate = r.lr;
    st.trainer.weight_decay = r.weight_decay;
    st.trainer.teacher_momentum = r.momentum;
    st.trainer.teacher_temperature = r.teacher_temp;
    st.trainer.nonfinite_steps = nonfinite_steps;
  });
}

void StatusReporter::Health(const HealthReport& h) {
  Update([&](RunStatus& st) {
    st.trainer.teacher_entropy = h.health.teacher_entropy;
    st.trainer.teacher_entropy_ratio = h.health.teacher_entropy_ratio;
    st.trainer.student_teacher_kl = h.health.student_teacher_kl;
    st.trainer.teacher_batch_entropy = h.health.teacher_batch_entropy;
    st.trainer.center_norm = h.health.center_norm;
    st.trainer.backbone_cls_std = h.health.backbone_cls_std;
    st.trainer.collapse = h.collapse;
  });
}

void StatusReporter::Learning(const LearningReport& r) {
  Update([&](RunStatus& st) {
    st.trainer.learning_check_epoch = r.epoch;
    st.trainer.knn_top1 = r.trained_top1;
    st.trainer.knn_random_top1 = r.random_top1;
    st.trainer.knn_pixels_top1 = r.pixels_top1;
    st.trainer.learning_margin = r.margin;
    st.trainer.learning_verdict = r.verdict().name;
  });
}

void StatusReporter::Recovery(const RecoveryReport& r) {
  Update([&](RunStatus& st) {
    st.trainer.recoveries = r.recovery;
    st.trainer.max_recoveries = r.max_recoveries;
    st.trainer.last_recovery = r.verdict + " at iteration " + std::to_string(r.from_iteration) + ", back to " +
                       std::to_string(r.to_iteration);
  });
}

void StatusReporter::State(RunState s) {
  Update([s](RunStatus& st) { st.state = s; });
}

void StatusReporter::Checkpoint(const CheckpointReport& r) {
  Update([&](RunStatus& st) {
    st.trainer.last_checkpoint = r.path;
    st.trainer.last_checkpoint_unix_ms = r.unix_ms;
  });
}

void StatusReporter::End(bool completed, const Status& error) {
  Update([&](RunStatus& st) {
    if (!error.ok()) {
      st.state = RunState::kFailed;
      st.error = error.ToString();
    } else {
      st.state = completed ? RunState::kCompleted : RunState::kStopped;
    }
  });
  if (control_ && !error.ok()) control_->CompleteCheckpoints(error, 0);
}

}  // namespace scdino::training
