#include "model/dino_loss.h"

#include "model/schedules.h"

namespace scdino::model {

DinoLossImpl::DinoLossImpl(DinoLossOptions o) : o_(std::move(o)) {
  TORCH_CHECK(o_.ncrops() >= 2, "DINO loss needs at least the 2 global crops, got ncrops=", o_.ncrops());
  center = register_buffer("center", torch::zeros({1, o_.out_dim()}));
  teacher_temps_ = TeacherTempSchedule(o_.warmup_teacher_temp(), o_.teacher_temp(),
                                       o_.warmup_teacher_temp_epochs(), o_.epochs());
}

torch::Tensor DinoLossImpl::forward(const torch::Tensor& student_out, const torch::Tensor& teacher_out, int64_t epoch) {
  TORCH_CHECK(epoch >= 0 && epoch < static_cast<int64_t>(teacher_temps_.size()), "epoch ", epoch,
              " is outside the teacher-temperature schedule of ", teacher_temps_.size(), " epochs");
  auto student = (student_out / o_.student_temp()).chunk(o_.ncrops());
  const double temp = teacher_temps_[epoch];
  auto teacher = torch::softmax((teacher_out - center) / temp, -1).detach().chunk(2);
  torch::Tensor total;
  int64_t terms = 0;
  for (size_t iq = 0; iq < teacher.size(); ++iq) {
    for (size_t v = 0; v < student.size(); ++v) {
      if (v == iq) continue;
      auto l = torch::sum(-teacher[iq] * torch::log_softmax(student[v], -1), -1).mean();
      total = total.defined() ? total + l : l;
      ++terms;
    }
  }
  return total / static_cast<double>(terms);
}

torch::Tensor DinoLossImpl::batch_sum(const torch::Tensor& teacher_out) const {
  torch::NoGradGuard guard;
  // fp32 even when the teacher ran under autocast: the center is fp32.
  return torch::sum(teacher_out.detach(), 0, /*keepdim=*/true, torch::kFloat);
}

void DinoLossImpl::update_center(const torch::Tensor& mean) {
  torch::NoGradGuard guard;
  center.copy_(center * o_.center_momentum() + mean * (1.0 - o_.center_momentum()));
}

}  // namespace scdino::model
