// DINO's health signals: what tells a learning run from a collapsed one
// (docs/training.md), computed inside the step over the global batch, and
// the collapse verdict judged on their average over a logging interval.
// Plain values and pure functions; thread-compatible.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace scdino::model {

struct DinoHealth {
  /// Mean entropy (nats) of the loss's targets: the centred, sharpened
  /// teacher distribution softmax((t - center) / teacher_temp), or its
  /// Sinkhorn-Knopp equipartition.
  double teacher_entropy = 0.0;
  /// teacher_entropy / ln(out_dim): near 1, the teacher says nothing.
  double teacher_entropy_ratio = 0.0;
  /// Mean KL(teacher || student) over the loss's (teacher view, student
  /// view) pairs, in nats: loss - teacher_entropy, exactly, since every
  /// teacher view meets the same number of student views.
  double student_teacher_kl = 0.0;
  /// Entropy of the batch-mean teacher distribution (each rank's batch,
  /// averaged over ranks): near 0, every image lands on the same prototype.
  double teacher_batch_entropy = 0.0;
  /// L2 norm of the center the step used (before its update).
  double center_norm = 0.0;
  /// Mean over dimensions of the batch std of the L2-normalised teacher
  /// backbone CLS: near 0, every image has the same features.
  double backbone_cls_std = 0.0;
};

/// Values HealthSums contributes to a step's exchange.
constexpr int64_t kHealthSums = 4;
/// This rank's share of the health signals, summable over ranks (fp32,
/// [kHealthSums]): sum of the rows' teacher entropies, rows x batch-mean
/// entropy, rows x CLS std, rows x loss. teacher_targets: [rows, K], the
/// loss's targets (DinoLoss::teacher_targets); teacher_cls: [rows, D].
torch::Tensor HealthSums(const torch::Tensor& teacher_targets, const torch::Tensor& teacher_cls,
                         const torch::Tensor& loss);
/// The signals from HealthSums summed over ranks and the rows behind them.
DinoHealth HealthFromSums(const torch::Tensor& sums, double rows, int64_t out_dim, double center_norm);

/// The mean of the signals of several steps (a logging interval).
class HealthAverage {
 public:
  void Add(const DinoHealth& h);
  DinoHealth Mean() const;
  int64_t steps() const { return steps_; }

 private:
  DinoHealth sum_;
  int64_t steps_ = 0;
};

/// Where a run is judged collapsed (docs/training.md says why).
struct CollapseThresholds {
  /// Uniform collapse: the teacher is near uniform over the prototypes, and
  /// the student matches it (nothing left to learn) or the teacher's answer
  /// no longer depends on the image (batch entropy - teacher entropy, the
  /// mutual information of image and prototype, below a share of ln K).
  /// docs/training.md shows the runs these were set on.
  double uniform_entropy_ratio = 0.8;
  double uniform_kl = 0.2;
  double uniform_information_ratio = 0.05;
  /// One-hot collapse: the batch's images share one or two prototypes.
  double onehot_batch_entropy = 0.5;
};

enum class Collapse { kHealthy, kUniform, kOneHot };
/// "healthy", "uniform_collapse", "onehot_collapse".
const char* CollapseName(Collapse c);
Collapse JudgeCollapse(const DinoHealth& h, const CollapseThresholds& t = {});
/// "teacher entropy 0.99 of ln(out_dim), student-teacher KL 0.001 nats": the
/// signals behind a verdict, for messages.
std::string DescribeCollapse(Collapse c, const DinoHealth& h);

}  // namespace scdino::model
