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

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {}

bool LossScaler::Unscale(const std::vector<NamedParam>& params) const {
  torch::NoGradGuard guard;
  const double inv = 1.0 / scale_;
  std::vector<torch::Tensor> finite;
  for (const auto& p : params) {
    auto g = p.param.grad();
    if (!g.defined()) continue;
    g.mul_(inv);
    finite.push_back(torch::isfinite(g).all());
  }
  // One device-to-host read for all parameters.
  return finite.empty() || torch::stack(finite).all().item<bool>();
}

void LossScaler::Update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
}

void LossScaler::SaveState(const std::string& prefix, TensorMap& out) const {
  out[prefix + "scale"] = torch::tensor(scale_, torch::kFloat64);
  out[prefix + "growth_tracker"] = torch::tensor(static_cast<double>(growth_tracker_), torch::kFloat64);
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
  scale_ = s->second.item<double>();
  growth_tracker_ = static_cast<int64_t>(g->second.item<double>());
  if (!(scale_ > 0) || !std::isfinite(scale_)) {
    return Status::DataLoss(origin + ": '" + prefix + "scale' is " + std::to_string(scale_) + ", expected > 0");
  }
  return Status::Ok();
}

}  // namespace scdino::model
