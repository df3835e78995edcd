// Mixed precision for the DINO step: autocast regions (bf16, or fp16 with a
// dynamic loss scale) around forward and loss, while parameters, gradients
// and optimizer state stay fp32 ("master weights"). The autocast calls differ
// between LibTorch 1.13 and 2.4+; this header hides which one is in use.
// The guards act on the calling thread's autocast state; a LossScaler belongs to one training loop.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/safetensors.h"
#include "common/status.h"
#include "model/optim.h"

namespace scdino::model {

enum class Precision { kFp32, kBf16, kFp16 };

/// "fp32" | "bf16" | "fp16".
StatusOr<Precision> ParsePrecision(const std::string& name);
const char* PrecisionName(Precision p);

/// Whether an autocast region is active on this thread for `type`'s devices.
bool AutocastActive(torch::DeviceType type);

/// Enables autocast to bf16/fp16 for `device`'s type for its lifetime and
/// restores the previous state after (nesting-safe). kFp32 does nothing.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType type_ = torch::kCPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  /// Consecutive finite steps before the scale grows.
  int64_t growth_interval = 2000;
};

/// Dynamic loss scaling for fp16 (as torch.cuda.amp.GradScaler): the loss is
/// multiplied by the scale before backward; Unscale divides the gradients
/// back (before clipping) and says on the device whether one is not finite;
/// Update halves the scale after an overflow (the optimizer step is
/// skipped) and doubles it after growth_interval clean steps. Powers of two
/// keep scaling exact. The scale and the count of clean steps are scalar
/// tensors on the training device (float64): nothing is read on the host
/// during a step.
class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {}, torch::Device device = torch::kCPU);
  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }
  /// Divides `grads` by the scale in place; a bool scalar, true when a
  /// value is not finite (an overflow).
  torch::Tensor Unscale(const torch::Tensor& grads) const;
  /// After a step with `found_inf` (Unscale's answer): back off or count a
  /// clean step. Where `counts` (a bool scalar; undefined: always) is false,
  /// nothing changes (a step whose loss was not finite tried nothing).
  void Update(const torch::Tensor& found_inf, const torch::Tensor& counts = {});
  /// The scale now (reads the device: for logs, not for every step).
  double scale() const;

  /// "<prefix>scale" and "<prefix>growth_tracker" (float64 scalars), so a
  /// resumed run continues with the same scale. Loading a map without them
  /// (a run that had no loss scaling) keeps the initial scale.
  void SaveState(const std::string& prefix, TensorMap& out) const;
  Status LoadState(const std::string& prefix, const TensorMap& in, const std::string& origin);

 private:
  LossScalerOptions options_;
  torch::Tensor scale_, growth_tracker_;
};

}  // namespace scdino::model
