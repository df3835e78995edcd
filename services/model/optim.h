// The optimiser side of a DINO step over flat parameters (model/flat_params.h):
// AdamW, DINO's per-parameter gradient clipping, the last-layer freeze and
// the teacher EMA, each a handful of operations over the whole model, none
// of which reads a value on the host. A step that must not change anything
// (a non-finite loss, an fp16 overflow) is skipped on the device: `apply`
// is a bool scalar tensor there, and with it false every state stays as it
// was.
#pragma once

#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "common/status.h"
#include "model/flat_params.h"

namespace scdino::model {

/// Trainable parameters of `module`, split as DINO's get_params_groups:
/// [0] regularised (weights), [1] not regularised (biases and 1-D tensors).
std::array<std::vector<NamedParam>, 2> ParamGroups(const torch::nn::Module& module);

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

/// AdamW with decoupled weight decay (torch.optim.AdamW) over the trainable
/// part of a FlatParameters, moments in two buffers of its layout, state
/// under parameter names so checkpoints are readable and resume is exact.
/// Parameters without a gradient at a step (the cancelled last layer) are
/// left out, as PyTorch does: their step counts stay behind (the reference
/// skips the frozen last layer's count in epoch 0; parity), so bias
/// corrections are per parameter, computed on the device for each group of
/// parameters that share a count. Which implementation runs: LibTorch's
/// fused AdamW on CUDA where it has one (2.1+); a single pass per buffer
/// for float32 CPU buffers with scdino's CPU kernels on (scdino.cpu_gemm);
/// otherwise tensor operations over the flat buffers. Not thread-safe.
class AdamW {
 public:
  /// `params` must outlive the optimiser.
  AdamW(FlatParameters* params, AdamWOptions options = {});

  /// One update where `apply` (a bool scalar on the parameters' device;
  /// undefined: always) is true; nothing changes where it is false.
  /// Weights (FlatParameters' decay) decay by lr * weight_decay first.
  void step(double lr, double weight_decay, const torch::Tensor& apply = {});
  /// Every gradient bound to its flat view and zeroed (one operation).
  void zero_grad();

  /// State as "<prefix><param>.exp_avg", ".exp_avg_sq", ".step" (reads the
  /// device: for checkpoints, not for every step).
  void save_state(const std::string& prefix, TensorMap& out) const;
  /// Restores what save_state wrote; names the missing or misshapen entry.
  Status load_state(const std::string& prefix, const TensorMap& in, const std::string& origin);

  /// Which implementation steps (for start-up lines and benchmarks):
  /// "fused", "cpu" or "tensor ops".
  std::string implementation() const;

 private:
  /// Parameters that share a step count (one scalar tensor, float32, on
  /// the device).
  struct CountGroup {
    torch::Tensor step;
    std::vector<size_t> members;
  };
  /// Gives the parameters active at this step and the others their own
  /// count groups (the last layer, while frozen).
  void SplitGroups(const std::vector<bool>& active);
  void StepCpu(double lr, double weight_decay, const std::vector<bool>& active, bool apply);
  void StepTensors(double lr, double weight_decay, const std::vector<bool>& active, const torch::Tensor& apply);

  // Constant after construction.
  FlatParameters* flat_;
  AdamWOptions o_;
  torch::Tensor always_, one_, zero_;  // scalars on the device, master dtype
  // State changed by step and load_state.
  torch::Tensor exp_avg_, exp_avg_sq_;  // the trainable layout
  std::vector<CountGroup> groups_;
  std::vector<size_t> group_of_;  // per trainable parameter
};

/// DINO's clip_gradients over flat gradients: each parameter's gradient
/// whose L2 norm exceeds `clip` is scaled by clip / (norm + 1e-6), a norm
/// and a product per segment, nothing read on the host.
class GradientClipper {
 public:
  GradientClipper(FlatParameters* params, double clip);
  void Clip();

 private:
  FlatParameters* flat_;
  double clip_;
  torch::Tensor norms_;                      // one per trainable parameter, in segment order
  std::vector<torch::Tensor> grad_views_, norm_views_;  // per segment
};

/// Cancels the gradients of the head's last layer while epoch < freeze_epochs.
void CancelLastLayerGradients(const std::vector<NamedParam>& params, int64_t epoch, int64_t freeze_epochs);

/// teacher = m * teacher + (1 - m) * student over both flat buffers (the
/// same layout), where `apply` (a bool scalar; undefined: always) is true.
void UpdateTeacher(const FlatParameters& student, FlatParameters& teacher, double momentum,
                   const torch::Tensor& apply = {});

}  // namespace scdino::model
