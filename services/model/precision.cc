#include "model/precision.h"

#include <ATen/autocast_mode.h>

#include <cmath>

#include "common/torch_compat.h"

namespace scdino::model {

using compat::AutocastDtype;
using compat::AutocastEnabled;
using compat::SetAutocastDtype;
using compat::SetAutocastEnabled;

bool AutocastActive(torch::DeviceType type) { return AutocastEnabled(type); }

StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Status::InvalidArgument("precision '" + name + "': expected fp32, bf16 or fp16");
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    default: return "fp32";
  }
}

AutocastGuard::AutocastGuard(torch::Device device, Precision precision) {
  if (precision == Precision::kFp32) return;
  TORCH_CHECK(device.is_cuda() || device.is_cpu(), "autocast: unsupported device ", device);
  active_ = true;
  type_ = device.type();
  was_enabled_ = AutocastEnabled(type_);
  was_dtype_ = AutocastDtype(type_);
  SetAutocastEnabled(type_, true);
  SetAutocastDtype(type_, precision == Precision::kBf16 ? torch::kBFloat16 : torch::kHalf);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Casts are cached for the outermost region only; drop them on leaving it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(type_, was_enabled_);
  SetAutocastDtype(type_, was_dtype_);
}

LossScaler::LossScaler(LossScalerOptions options, torch::Device device)
    : options_(options),
      scale_(torch::full({}, options.init_scale, torch::TensorOptions(torch::kFloat64).device(device))),
      growth_tracker_(torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device))) {}

torch::Tensor LossScaler::Unscale(const torch::Tensor& grads) const {
  torch::NoGradGuard guard;
  grads.mul_(scale_.reciprocal());
  return grads.isfinite().all().logical_not();
}

void LossScaler::Update(const torch::Tensor& found_inf, const torch::Tensor& counts) {
  torch::NoGradGuard guard;
  const auto tracker = torch::where(found_inf, 0.0, growth_tracker_ + 1.0);
  const auto grow = tracker >= static_cast<double>(options_.growth_interval);
  auto scale = torch::where(found_inf, scale_ * options_.backoff_factor,
                            torch::where(grow, scale_ * options_.growth_factor, scale_));
  auto next_tracker = torch::where(grow, 0.0, tracker);
  if (counts.defined()) {
    scale = torch::where(counts, scale, scale_);
    next_tracker = torch::where(counts, next_tracker, growth_tracker_);
  }
  scale_.copy_(scale);
  growth_tracker_.copy_(next_tracker);
}

double LossScaler::scale() const { return scale_.item<double>(); }

void LossScaler::SaveState(const std::string& prefix, TensorMap& out) const {
  out[prefix + "scale"] = scale_.to(torch::kCPU).clone();
  out[prefix + "growth_tracker"] = growth_tracker_.to(torch::kCPU).clone();
}

Status LossScaler::LoadState(const std::string& prefix, const TensorMap& in, const std::string& origin) {
  auto s = in.find(prefix + "scale");
  auto g = in.find(prefix + "growth_tracker");
  // A checkpoint written without loss scaling: start from the initial scale.
  if (s == in.end() && g == in.end()) return Status::Ok();
  if (s == in.end() || g == in.end() || s->second.numel() != 1 || g->second.numel() != 1) {
    return Status::DataLoss(origin + ": '" + prefix + "scale' and '" + prefix +
                            "growth_tracker' must both be present, one value each");
  }
  const double scale = s->second.item<double>();
  if (!(scale > 0) || !std::isfinite(scale)) {
    return Status::DataLoss(origin + ": '" + prefix + "scale' is " + std::to_string(scale) + ", expected > 0");
  }
  torch::NoGradGuard guard;
  scale_.fill_(scale);
  growth_tracker_.fill_(std::floor(g->second.item<double>()));
  return Status::Ok();
}

}  // namespace scdino::model
