// DINO loss: cross-entropy between the teacher's target for each global view
// and the student output of every other view. The target is the centred,
// sharpened teacher output (DINO), or the Sinkhorn-Knopp equipartition of
// the sharpened teacher outputs over the global batch (DINOv2's
// `sinkhorn_knopp` centering: every prototype gets an equal share of the
// batch, so the teacher cannot give every image the same answer).
// Not thread-safe: the training loop owns the loss and its center.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace scdino::model {

enum class TeacherCentering { kCenter, kSinkhornKnopp };

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
  TORCH_ARG(TeacherCentering, centering) = TeacherCentering::kCenter;
  /// Sinkhorn-Knopp normalisations (each: prototypes, then images), as DINOv2.
  TORCH_ARG(int64_t, sinkhorn_iterations) = 3;
};

/// Sums a tensor over ranks in place (absent: one rank).
using SumOverRanks = std::function<void(torch::Tensor&)>;

class DinoLossImpl : public torch::nn::Module {
 public:
  explicit DinoLossImpl(DinoLossOptions o);

  /// Loss averaged over all (teacher view, student view) pairs of different
  /// views, with the current center. student_out: [ncrops*B, K];
  /// teacher_out: [2*B, K]; views crop-major. The center is not moved here:
  /// the step calls update_center once the loss is known to be finite.
  torch::Tensor forward(const torch::Tensor& student_out, const torch::Tensor& teacher_out, int64_t epoch);

  /// The teacher's targets for teacher_out ([2*B, K]): fp32 rows that sum to
  /// 1, detached. Sinkhorn-Knopp sums over ranks (sum_over_ranks) so that
  /// the equipartition holds over the global batch.
  torch::Tensor teacher_targets(const torch::Tensor& teacher_out, int64_t epoch,
                                const SumOverRanks& sum_over_ranks = {}) const;
  /// Mean cross-entropy of the student views against the targets over all
  /// pairs of different views, in the targets' dtype (one matrix product
  /// for every pair).
  torch::Tensor cross_entropy(const torch::Tensor& student_out, const torch::Tensor& targets) const;
  double teacher_temp(int64_t epoch) const;

  /// The teacher outputs summed over the batch, [1, K] fp32: what the
  /// center moves towards, once summed over ranks and divided by the rows.
  torch::Tensor batch_sum(const torch::Tensor& teacher_out) const;
  /// Center EMA towards `mean` ([1, K], the teacher outputs' mean over the
  /// global batch) where `apply` (a bool scalar on the device; undefined:
  /// always) is true. With Sinkhorn-Knopp the center is not used and stays 0.
  void update_center(const torch::Tensor& mean, const torch::Tensor& apply = {});

  /// Per-epoch teacher temperature: linear warm-up, then constant.
  const std::vector<double>& teacher_temp_schedule() const { return teacher_temps_; }
  torch::Tensor center;

 private:
  DinoLossOptions o_;
  std::vector<double> teacher_temps_;
};
TORCH_MODULE(DinoLoss);

}  // namespace scdino::model
