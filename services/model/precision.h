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
/// back (before clipping) and reports whether all are finite; Update halves
/// the scale after an overflow (the optimizer step is skipped) and doubles it
/// after growth_interval clean steps. Powers of two keep scaling exact.
class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});
  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }
  /// Divides every gradient by the scale; true when all are finite.
  bool Unscale(const std::vector<NamedParam>& params) const;
  void Update(bool found_inf);
  double scale() const { return scale_; }

  /// "<prefix>scale" and "<prefix>growth_tracker" (float64 scalars), so a
  /// resumed run continues with the same scale. Loading a map without them
  /// (a run that had no loss scaling) keeps the initial scale.
  void SaveState(const std::string& prefix, TensorMap& out) const;
  Status LoadState(const std::string& prefix, const TensorMap& in, const std::string& origin);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace scdino::model
