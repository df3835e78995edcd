#include "model/optim.h"

#include <cmath>

#include "common/parallel.h"
#include "common/torch_compat.h"
#include "model/cpu_gemm.h"
#include "model/cpu_kernels.h"

namespace scdino::model {

namespace {

// scdino's one-pass CPU kernels (the AdamW update, the EMA): float32 CPU
// buffers, with scdino's CPU paths on (scdino.cpu_gemm; the step benchmark
// turns them off to count the operations a GPU runs). The same operations
// in the same order and precision as the tensor ops, so results stay within
// the parity fixture's rounding tolerance.
bool CpuKernels(const torch::Tensor& t) {
  return CpuGemmEnabled() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
}

// A bool scalar read where it lives, on the CPU: no operation, no wait.
bool HostFlag(const torch::Tensor& apply) {
  if (!apply.defined()) return true;
  TORCH_CHECK(apply.device().is_cpu() && apply.scalar_type() == torch::kBool && apply.numel() == 1,
              "a CPU step's apply flag must be one bool on the CPU, got ", apply.scalar_type(), " ", apply.sizes());
  return *apply.data_ptr<bool>();
}

constexpr int64_t kGrain = 1 << 15;

void AdamWCpu(float* p, const float* g, float* ma, float* va, int64_t n, const AdamWScalars& k) {
  ParallelFor(0, n, kGrain, [&](int64_t begin, int64_t end) { AdamWRange(p, g, ma, va, begin, end, k); });
}

// Consecutive trainable parameters (in layout order, so a contiguous slice
// of the flat buffers) that are active and share a count group.
struct Run {
  int64_t begin = 0, end = 0;
  size_t group = 0;
};

std::vector<Run> ActiveRuns(const FlatParameters& flat, const std::vector<bool>& active,
                            const std::vector<size_t>& group_of) {
  std::vector<Run> runs;
  const auto& entries = flat.entries();
  for (size_t i = 0; i < flat.trainable().size(); ++i) {
    if (!active[i]) continue;
    const auto& e = entries[i];
    if (!runs.empty() && runs.back().end == e.offset && runs.back().group == group_of[i]) {
      runs.back().end = e.offset + e.numel;
    } else {
      runs.push_back({e.offset, e.offset + e.numel, group_of[i]});
    }
  }
  return runs;
}

}  // namespace

std::array<std::vector<NamedParam>, 2> ParamGroups(const torch::nn::Module& module) {
  std::array<std::vector<NamedParam>, 2> g;
  for (const auto& p : module.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    g[DecaysWeight(p.key(), p.value()) ? 0 : 1].push_back({p.key(), p.value()});
  }
  return g;
}

AdamW::AdamW(FlatParameters* params, AdamWOptions options) : flat_(params), o_(options) {
  TORCH_CHECK(flat_ != nullptr && flat_->trainable_numel() > 0, "AdamW needs trainable parameters");
  const auto opts = flat_->values().options();
  always_ = torch::ones({}, opts.dtype(torch::kBool));
  one_ = torch::ones({}, opts);
  zero_ = torch::zeros({}, opts);
  exp_avg_ = torch::zeros({flat_->trainable_numel()}, opts);
  exp_avg_sq_ = torch::zeros({flat_->trainable_numel()}, opts);
  CountGroup all;
  all.step = torch::zeros({}, opts.dtype(torch::kFloat32));
  for (size_t i = 0; i < flat_->trainable().size(); ++i) all.members.push_back(i);
  groups_.push_back(std::move(all));
  group_of_.assign(flat_->trainable().size(), 0);
}

std::string AdamW::implementation() const {
  const auto& v = flat_->values();
  if (CpuKernels(v)) return "cpu";
  if (v.is_cuda() && compat::kHaveFusedAdamW) return "fused";
  return "tensor ops";
}

void AdamW::SplitGroups(const std::vector<bool>& active) {
  const size_t n = groups_.size();
  for (size_t g = 0; g < n; ++g) {
    std::vector<size_t> on, off;
    for (size_t i : groups_[g].members) (active[i] ? on : off).push_back(i);
    if (on.empty() || off.empty()) continue;
    CountGroup split;
    split.step = groups_[g].step.clone();
    split.members = off;
    for (size_t i : off) group_of_[i] = groups_.size();
    groups_[g].members = on;
    groups_.push_back(std::move(split));
  }
}

void AdamW::step(double lr, double weight_decay, const torch::Tensor& apply) {
  torch::NoGradGuard guard;
  std::vector<bool> active(flat_->trainable().size());
  bool any = false;
  for (size_t i = 0; i < active.size(); ++i) any |= (active[i] = flat_->GradInPlace(i));
  if (!any) return;
  SplitGroups(active);
  if (CpuKernels(flat_->values())) {
    StepCpu(lr, weight_decay, active, HostFlag(apply));
  } else {
    StepTensors(lr, weight_decay, active, apply.defined() ? apply : always_);
  }
}

void AdamW::StepCpu(double lr, double weight_decay, const std::vector<bool>& active, bool apply) {
  if (!apply) return;
  const auto runs = ActiveRuns(*flat_, active, group_of_);
  std::vector<bool> counted(groups_.size(), false);
  for (const auto& run : runs) {
    float* step = groups_[run.group].step.data_ptr<float>();
    if (!counted[run.group]) {
      *step += 1.0f;
      counted[run.group] = true;
    }
  }
  // Decoupled weight decay per parameter, then the update per run.
  float* values = flat_->trainable_values().data_ptr<float>();
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const auto& entries = flat_->entries();
  for (size_t i = 0; i < active.size(); ++i) {
    if (!active[i] || !entries[i].decay) continue;
    float* p = values + entries[i].offset;
    ParallelFor(0, entries[i].numel, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) p[j] *= decay;
    });
  }
  for (const auto& run : runs) {
    const double step = *groups_[run.group].step.data_ptr<float>();
    const AdamWScalars k{1.0f,
                         static_cast<float>(o_.beta1),
                         static_cast<float>(1.0 - o_.beta1),
                         static_cast<float>(o_.beta2),
                         static_cast<float>(1.0 - o_.beta2),
                         static_cast<float>(std::sqrt(1.0 - std::pow(o_.beta2, step))),
                         static_cast<float>(o_.eps),
                         static_cast<float>(-lr / (1.0 - std::pow(o_.beta1, step)))};
    AdamWCpu(values + run.begin, flat_->grads().data_ptr<float>() + run.begin, exp_avg_.data_ptr<float>() + run.begin,
             exp_avg_sq_.data_ptr<float>() + run.begin, run.end - run.begin, k);
  }
}

void AdamW::StepTensors(double lr, double weight_decay, const std::vector<bool>& active, const torch::Tensor& apply) {
  const auto runs = ActiveRuns(*flat_, active, group_of_);
  const auto& grads = flat_->grads();
  const auto& values = flat_->trainable_values();
  // A skipped step: gradients that may be NaN become 0, so that every
  // update below, scaled by 0 or 1, leaves the state as it was.
  const auto skip = apply.logical_not();
  grads.masked_fill_(skip, 0.0);
  const auto apply_f = apply.to(torch::kFloat32);
  std::vector<bool> counted(groups_.size(), false);
  for (const auto& run : runs) {
    if (!counted[run.group]) groups_[run.group].step.add_(apply_f);
    counted[run.group] = true;
  }
  // Decoupled weight decay: the decayed parameters' segments (or one by
  // one where a segment is only partly active).
  if (weight_decay != 0.0) {
    const auto decay = torch::where(apply, 1.0 - lr * weight_decay, one_);
    const auto& entries = flat_->entries();
    for (const auto& s : flat_->segments()) {
      if (!s.decay) continue;
      bool all = true;
      for (size_t i : s.members) all = all && active[i];
      if (all) {
        flat_->SegmentView(values, s).mul_(decay);
      } else {
        for (size_t i : s.members) {
          if (active[i]) values.narrow(0, entries[i].offset, entries[i].numel).mul_(decay);
        }
      }
    }
  }
  if (values.is_cuda() && compat::kHaveFusedAdamW) {
    std::vector<torch::Tensor> p, g, m, v, steps;
    for (const auto& run : runs) {
      const int64_t n = run.end - run.begin;
      p.push_back(values.narrow(0, run.begin, n));
      g.push_back(grads.narrow(0, run.begin, n));
      m.push_back(exp_avg_.narrow(0, run.begin, n));
      v.push_back(exp_avg_sq_.narrow(0, run.begin, n));
      steps.push_back(groups_[run.group].step);
    }
    compat::FusedAdamW(p, g, m, v, steps, lr, o_.beta1, o_.beta2, o_.eps, skip.to(torch::kFloat32));
    return;
  }
  // Bias corrections per count group, in float64 as the reference's Python
  // floats: correction2 = sqrt(1 - beta2^step), step size -lr / (1 - beta1^step)
  // (0 where the step is skipped; counts below 1 only occur there).
  std::vector<torch::Tensor> correction2(groups_.size()), step_size(groups_.size());
  const auto beta1 = torch::where(apply, o_.beta1, one_);
  const auto beta2 = torch::where(apply, o_.beta2, one_);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    if (!counted[gi]) continue;
    const auto step = groups_[gi].step.to(torch::kFloat64).clamp_min_(1.0);
    correction2[gi] = torch::pow(o_.beta2, step).neg_().add_(1.0).sqrt_();
    step_size[gi] = torch::where(apply, torch::pow(o_.beta1, step).neg_().add_(1.0).reciprocal_().mul_(-lr), zero_);
  }
  for (const auto& run : runs) {
    const int64_t n = run.end - run.begin;
    auto p = values.narrow(0, run.begin, n);
    auto g = grads.narrow(0, run.begin, n);
    auto m = exp_avg_.narrow(0, run.begin, n);
    auto v = exp_avg_sq_.narrow(0, run.begin, n);
    m.mul_(beta1).add_(g, 1.0 - o_.beta1);
    v.mul_(beta2).addcmul_(g, g, 1.0 - o_.beta2);
    auto denom = v.sqrt().div_(correction2[run.group]).add_(o_.eps);
    p.addcdiv_(m * step_size[run.group], denom);
  }
}

void AdamW::zero_grad() { flat_->ZeroGrads(); }

void AdamW::save_state(const std::string& prefix, TensorMap& out) const {
  const auto& entries = flat_->entries();
  // Every group's count in one read of the device (one synchronisation per
  // checkpoint, not one per parameter).
  std::vector<torch::Tensor> counts;
  for (const auto& g : groups_) counts.push_back(g.step.reshape({1}));
  const auto steps = counts.empty() ? torch::Tensor() : torch::cat(counts).to(torch::kCPU, torch::kFloat64);
  for (size_t i = 0; i < flat_->trainable().size(); ++i) {
    const auto& e = entries[i];
    const std::string base = prefix + e.p.name;
    const auto step = static_cast<int64_t>(steps.data_ptr<double>()[group_of_[i]]);
    out[base + ".step"] = torch::tensor({step}, torch::kInt64);
    if (step > 0) {
      out[base + ".exp_avg"] = exp_avg_.narrow(0, e.offset, e.numel).view(e.p.param.sizes());
      out[base + ".exp_avg_sq"] = exp_avg_sq_.narrow(0, e.offset, e.numel).view(e.p.param.sizes());
    }
  }
}

Status AdamW::load_state(const std::string& prefix, const TensorMap& in, const std::string& origin) {
  torch::NoGradGuard guard;
  const auto& entries = flat_->entries();
  const size_t n = flat_->trainable().size();
  std::vector<int64_t> steps(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = entries[i].p.name;
    const std::string base = prefix + name;
    auto st = in.find(base + ".step");
    if (st == in.end()) return Status::DataLoss(origin + ": optimizer state '" + base + ".step' is missing");
    if (st->second.numel() != 1) {
      return Status::DataLoss(origin + ": optimizer state '" + base + ".step' holds " +
                              std::to_string(st->second.numel()) + " values, expected 1");
    }
    steps[i] = st->second.item<int64_t>();
    if (steps[i] < 0) {
      return Status::DataLoss(origin + ": optimizer state '" + base + ".step' is " + std::to_string(steps[i]) +
                              ", expected a count >= 0");
    }
    if (steps[i] == 0) continue;
    auto a = in.find(base + ".exp_avg");
    auto b = in.find(base + ".exp_avg_sq");
    if (a == in.end() || b == in.end()) {
      return Status::DataLoss(origin + ": optimizer moments of '" + name + "' are missing");
    }
    if (a->second.sizes() != entries[i].p.param.sizes() || b->second.sizes() != entries[i].p.param.sizes()) {
      return Status::DataLoss(origin + ": optimizer moments of '" + name + "' do not match its shape");
    }
  }
  // Every check passed: now the state changes, all of it.
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  groups_.clear();
  std::map<int64_t, size_t> group_of_step;
  for (size_t i = 0; i < n; ++i) {
    const auto& e = entries[i];
    if (steps[i] > 0) {
      exp_avg_.narrow(0, e.offset, e.numel).copy_(in.at(prefix + e.p.name + ".exp_avg").reshape({-1}));
      exp_avg_sq_.narrow(0, e.offset, e.numel).copy_(in.at(prefix + e.p.name + ".exp_avg_sq").reshape({-1}));
    }
    auto [it, fresh] = group_of_step.emplace(steps[i], groups_.size());
    if (fresh) {
      CountGroup g;
      g.step = torch::full({}, static_cast<double>(steps[i]), exp_avg_.options().dtype(torch::kFloat32));
      groups_.push_back(std::move(g));
    }
    groups_[it->second].members.push_back(i);
    group_of_[i] = it->second;
  }
  return Status::Ok();
}

GradientClipper::GradientClipper(FlatParameters* params, double clip) : flat_(params), clip_(clip) {
  TORCH_CHECK(flat_ != nullptr && flat_->grads().defined(), "gradient clipping needs trainable parameters");
  int64_t count = 0;
  for (const auto& s : flat_->segments()) count += static_cast<int64_t>(s.members.size());
  norms_ = torch::zeros({count}, flat_->grads().options());
  int64_t at = 0;
  for (const auto& s : flat_->segments()) {
    const int64_t k = static_cast<int64_t>(s.members.size());
    grad_views_.push_back(flat_->SegmentView(flat_->grads(), s));
    norm_views_.push_back(norms_.narrow(0, at, k).view({k, 1}));
    at += k;
  }
}

void GradientClipper::Clip() {
  torch::NoGradGuard guard;
  for (size_t s = 0; s < grad_views_.size(); ++s) {
    at::norm_out(norm_views_[s], grad_views_[s], 2, {1}, /*keepdim=*/true);
  }
  // clip / (norm + 1e-6), at most 1: multiplying by 1 is "scale only when
  // the coefficient is below 1" exactly.
  norms_.add_(1e-6).reciprocal_().mul_(clip_).clamp_max_(1.0);
  for (size_t s = 0; s < grad_views_.size(); ++s) grad_views_[s].mul_(norm_views_[s]);
}

void CancelLastLayerGradients(const std::vector<NamedParam>& params, int64_t epoch, int64_t freeze_epochs) {
  if (epoch >= freeze_epochs) return;
  for (const auto& p : params) {
    if (p.name.find("last_layer") != std::string::npos) p.param.mutable_grad() = torch::Tensor();
  }
}

void UpdateTeacher(const FlatParameters& student, FlatParameters& teacher, double m, const torch::Tensor& apply) {
  torch::NoGradGuard guard;
  const auto& s = student.values();
  const auto& t = teacher.values();
  TORCH_CHECK(s.sizes() == t.sizes(), "teacher EMA: the student has ", s.numel(), " parameter values, the teacher ",
              t.numel());
  if (CpuKernels(t) && s.scalar_type() == torch::kFloat32) {
    if (!HostFlag(apply)) return;
    // The reference's t * m + s * (1 - m) in one pass.
    float* tp = t.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    const float keep = static_cast<float>(m), take = static_cast<float>(1.0 - m);
    ParallelFor(0, t.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) tp[i] = tp[i] * keep + sp[i] * take;
    });
    return;
  }
  if (!apply.defined()) {
    t.mul_(m).add_(s * (1.0 - m));
    return;
  }
  // mul, then s * (1 - m) rounded and added: the reference's two roundings.
  const auto zero = torch::zeros({}, t.options());
  t.mul_(torch::where(apply, m, zero.add(1.0)));
  t.addcmul_(s, torch::where(apply, 1.0 - m, zero));
}

}  // namespace scdino::model
