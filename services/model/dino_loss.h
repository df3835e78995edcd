// DINO loss: cross-entropy between the centred, sharpened teacher output of
// each global view and the student output of every other view.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace scdino::model {

struct DinoLossOptions {
  DinoLossOptions(int64_t out_dim, int64_t ncrops) : out_dim_(out_dim), ncrops_(ncrops) {}
  TORCH_ARG(int64_t, out_dim);
  /// Views per image: 2 global + local_crops_number.
  TORCH_ARG(int64_t, ncrops);
  TORCH_ARG(double, warmup_teacher_temp) = 0.04;
  TORCH_ARG(double, teacher_temp) = 0.04;
  TORCH_ARG(int64_t, warmup_teacher_temp_epochs) = 0;
  /// Total epochs: length of the teacher-temperature schedule.
  TORCH_ARG(int64_t, epochs) = 100;
  TORCH_ARG(double, student_temp) = 0.1;
  TORCH_ARG(double, center_momentum) = 0.9;
};

/// Sums a tensor across ranks in place (identity on one process). Installed
/// by the distributed trainer so every rank keeps the same center.
using AllReduceSum = std::function<void(torch::Tensor&)>;

class DinoLossImpl : public torch::nn::Module {
 public:
  explicit DinoLossImpl(DinoLossOptions o);

  /// Loss averaged over all (teacher view, student view) pairs of different
  /// views, with the current center. student_out: [ncrops*B, K];
  /// teacher_out: [2*B, K]; views crop-major. The center is not moved here:
  /// the step calls update_center once the loss is known to be finite.
  torch::Tensor forward(const torch::Tensor& student_out, const torch::Tensor& teacher_out, int64_t epoch);

  /// Center EMA from the global batch mean (sum across ranks / world size).
  void update_center(const torch::Tensor& teacher_out);

  void set_all_reduce(AllReduceSum fn, int64_t world_size);

  /// Per-epoch teacher temperature: linear warm-up, then constant.
  const std::vector<double>& teacher_temp_schedule() const { return teacher_temps_; }
  torch::Tensor center;

 private:
  DinoLossOptions o_;
  std::vector<double> teacher_temps_;
  AllReduceSum all_reduce_;
  int64_t world_size_ = 1;
};
TORCH_MODULE(DinoLoss);

}  // namespace scdino::model
