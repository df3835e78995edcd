// The optimiser side of a DINO step: AdamW over two parameter groups,
// per-parameter gradient clipping, the last-layer freeze and the teacher EMA.
#pragma once

#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "common/status.h"

namespace scdino::model {

struct NamedParam {
  std::string name;
  torch::Tensor param;
};

/// Trainable parameters of `module`, split as DINO's get_params_groups:
/// [0] regularised (weights), [1] not regularised (biases and 1-D tensors).
std::array<std::vector<NamedParam>, 2> ParamGroups(const torch::nn::Module& module);

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

/// AdamW with decoupled weight decay (torch.optim.AdamW), per-parameter step
/// counts, and state kept under parameter names so checkpoints are readable
/// and resume is exact. Parameters whose gradient is undefined are skipped,
/// as PyTorch does. Ours rather than torch::optim::AdamW because that one
/// keys its state by position and counts one step for all parameters, while
/// the reference skips the frozen last layer's count in epoch 0 (parity) and
/// checkpoints need names; float32 CPU parameters are updated in one pass
/// each, others with foreach ops over the whole list. Not thread-safe.
class AdamW {
 public:
  AdamW(std::array<std::vector<NamedParam>, 2> groups, AdamWOptions options = {});

  /// One update; group 0 decays with `weight_decay`, group 1 never.
  void step(double lr, double weight_decay);
  /// Drops every gradient (set to undefined).
  void zero_grad();

  /// State as "<prefix><param>.exp_avg", ".exp_avg_sq", ".step".
  void save_state(const std::string& prefix, TensorMap& out) const;
  /// Restores what save_state wrote; names the missing or misshapen entry.
  Status load_state(const std::string& prefix, const TensorMap& in, const std::string& origin);

  const std::array<std::vector<NamedParam>, 2>& groups() const { return groups_; }

 private:
  struct State {
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;
  };
  std::array<std::vector<NamedParam>, 2> groups_;
  std::array<std::vector<State>, 2> state_;
  AdamWOptions o_;
};

/// DINO's clip_gradients: each gradient whose L2 norm exceeds `clip` is scaled
/// by clip / (norm + 1e-6). Computed on the device without host syncs.
void ClipGradients(const std::vector<NamedParam>& params, double clip);

/// Cancels the gradients of the head's last layer while epoch < freeze_epochs.
void CancelLastLayerGradients(const std::vector<NamedParam>& params, int64_t epoch, int64_t freeze_epochs);

/// teacher = m * teacher + (1 - m) * student, parameter by parameter (names
/// must match).
void UpdateTeacher(const torch::nn::Module& student, torch::nn::Module& teacher, double momentum);

}  // namespace scdino::model
