#include "training/epoch_log.h"

#include <cmath>

namespace scdino::training {

void EpochLog::Add(const StepReport& r) {
  if (r.finite) {
    loss_sum_ += r.loss;
    ++finite_steps_;
    health_.Add(r.health);
  } else {
    ++nonfinite_;
  }
  images_ += r.images;
  data_wait_ += r.data_wait_seconds;
  allreduce_wait_ += r.allreduce_wait_seconds;
}

nlohmann::json EpochLog::Line(int64_t epoch, int64_t iteration, double seconds, const StepReport& last,
                              const std::function<std::vector<double>(std::vector<double>)>& sum) const {
  // Loss averaged and images summed over ranks; waits are this rank's.
  const auto s = sum({loss_sum_, static_cast<double>(finite_steps_), static_cast<double>(images_)});
  const auto h = health_.Mean();
  return {{"epoch", epoch},
          {"iteration", iteration},
          {"loss", s[1] > 0 ? s[0] / s[1] : std::nan("")},
          {"lr", last.lr},
          {"wd", last.weight_decay},
          {"momentum", last.momentum},
          {"teacher_temp", last.teacher_temp},
          {"images_per_s", seconds > 0 ? s[2] / seconds : 0.0},
          {"data_wait_s", data_wait_},
          {"allreduce_wait_s", allreduce_wait_},
          {"nonfinite_steps", nonfinite_},
          {"teacher_entropy", h.teacher_entropy},
          {"teacher_entropy_ratio", h.teacher_entropy_ratio},
          {"student_teacher_kl", h.student_teacher_kl},
          {"teacher_batch_entropy", h.teacher_batch_entropy},
          {"center_norm", h.center_norm},
          {"backbone_cls_std", h.backbone_cls_std},
          {"epoch_time_s", seconds}};
}

nlohmann::json EpochLog::DinoLine(const nlohmann::json& line) {
  return {{"train_loss", line.at("loss")}, {"train_lr", line.at("lr")}, {"train_wd", line.at("wd")},
          {"epoch", line.at("epoch")}};
}

}  // namespace scdino::training
