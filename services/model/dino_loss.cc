#include "model/dino_loss.h"

#include "model/schedules.h"

namespace scdino::model {

DinoLossImpl::DinoLossImpl(DinoLossOptions o) : o_(std::move(o)) {
  TORCH_CHECK(o_.ncrops() >= 2, "DINO loss needs at least the 2 global crops, got ncrops=", o_.ncrops());
  center = register_buffer("center", torch::zeros({1, o_.out_dim()}));
  teacher_temps_ = TeacherTempSchedule(o_.warmup_teacher_temp(), o_.teacher_temp(),
                                       o_.warmup_teacher_temp_epochs(), o_.epochs());
}

double DinoLossImpl::teacher_temp(int64_t epoch) const {
  TORCH_CHECK(epoch >= 0 && epoch < static_cast<int64_t>(teacher_temps_.size()), "epoch ", epoch,
              " is outside the teacher-temperature schedule of ", teacher_temps_.size(), " epochs");
  return teacher_temps_[static_cast<size_t>(epoch)];
}

torch::Tensor DinoLossImpl::forward(const torch::Tensor& student_out, const torch::Tensor& teacher_out, int64_t epoch) {
  return cross_entropy(student_out, teacher_targets(teacher_out, epoch));
}

torch::Tensor DinoLossImpl::teacher_targets(const torch::Tensor& teacher_out, int64_t epoch,
                                            const SumOverRanks& sum_over_ranks) const {
  torch::NoGradGuard guard;
  const double temp = teacher_temp(epoch);
  const auto t = teacher_out.detach().to(center.scalar_type());
  if (o_.centering() == TeacherCentering::kCenter) return torch::softmax((t - center) / temp, -1);
  // Sinkhorn-Knopp over the global batch: Q [K, rows], scaled in turn so
  // that every prototype (row of Q) holds the same mass over the global
  // batch and every image (column) sums to 1. Constant factors (DINOv2's
  // 1/K and 1/rows) cancel in the next normalisation and are left out, so
  // the only exchange is the prototypes' sums. It starts from each image's
  // softmax: a per-image scale the image normalisation absorbs, and no
  // exchange of a maximum needed to keep exp() finite.
  auto q = torch::softmax(t / temp, -1).t().contiguous();
  for (int64_t i = 0; i < o_.sinkhorn_iterations(); ++i) {
    auto per_prototype = q.sum(1, /*keepdim=*/true);
    if (sum_over_ranks) sum_over_ranks(per_prototype);
    q.div_(per_prototype.clamp_min(1e-30));
    q.div_(q.sum(0, /*keepdim=*/true));
  }
  return q.t();
}

torch::Tensor DinoLossImpl::cross_entropy(const torch::Tensor& student_out, const torch::Tensor& targets) const {
  // Every (teacher view, student view) pair at once: with q [2, B*K] the
  // targets and l [V, B*K] the students' log-softmax (once per crop, not
  // once per teacher view as the reference writes it), q l^T [2, V] holds
  // each pair's sum over the batch; the two same-view pairs are left out.
  // In float32 whatever the autocast: a bf16 product over B*K terms would
  // round the loss itself.
  const int64_t V = o_.ncrops();
  const auto student = torch::log_softmax(student_out.to(targets.scalar_type()) / o_.student_temp(), -1);
  const int64_t rows = student.size(0) / V;
  TORCH_CHECK(student.size(0) == V * rows && targets.size(0) == 2 * rows, "DINO loss: ", student.size(0),
              " student rows for ", V, " crops and ", targets.size(0), " teacher rows for 2");
  const auto pairs = targets.reshape({2, -1}).mm(student.reshape({V, -1}).t());
  const double terms = 2.0 * static_cast<double>(V) - 2.0;
  return (pairs.diagonal().sum() - pairs.sum()) / (terms * static_cast<double>(rows));
}

torch::Tensor DinoLossImpl::batch_sum(const torch::Tensor& teacher_out) const {
  torch::NoGradGuard guard;
  // In the center's dtype (fp32, or fp64 for the parity test) even when the
  // teacher ran under autocast.
  return torch::sum(teacher_out.detach(), 0, /*keepdim=*/true, center.scalar_type());
}

void DinoLossImpl::update_center(const torch::Tensor& mean, const torch::Tensor& apply) {
  if (o_.centering() != TeacherCentering::kCenter) return;
  torch::NoGradGuard guard;
  auto moved = center * o_.center_momentum() + mean * (1.0 - o_.center_momentum());
  center.copy_(apply.defined() ? torch::where(apply, moved, center) : moved);
}

}  // namespace scdino::model
