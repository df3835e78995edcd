#include "model/optim.h"

#include "common/parallel.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace scdino::model {

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Element loops over float32 CPU tensors in one pass where the foreach ops
// make one pass per operation (AdamW: ten over parameters, moments and a
// temporary; the EMA: three). Same operations in the same order and
// precision as those ops, so results stay within the parity fixture's
// rounding tolerance.
bool PlainCpuFloat(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

constexpr int64_t kGrain = 1 << 15;

struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, correction2, eps, step_size;
};

void AdamWCpu(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& m, const torch::Tensor& v,
              const AdamWScalars& k) {
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* ma = m.data_ptr<float>();
  float* va = v.data_ptr<float>();
  ParallelFor(0, param.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = ma[i] * k.beta1 + gi * k.one_minus_beta1;
      const float vi = va[i] * k.beta2 + k.one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(vi) / k.correction2 + k.eps;
      ma[i] = mi;
      va[i] = vi;
      p[i] = p[i] * k.decay + k.step_size * mi / denom;
    }
  });
}
}  // namespace

std::array<std::vector<NamedParam>, 2> ParamGroups(const torch::nn::Module& module) {
  std::array<std::vector<NamedParam>, 2> g;
  for (const auto& p : module.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const bool no_decay = EndsWith(p.key(), ".bias") || p.value().dim() == 1;
    g[no_decay ? 1 : 0].push_back({p.key(), p.value()});
  }
  return g;
}

AdamW::AdamW(std::array<std::vector<NamedParam>, 2> groups, AdamWOptions options)
    : groups_(std::move(groups)), o_(options) {
  for (int g = 0; g < 2; ++g) state_[g].resize(groups_[g].size());
}

void AdamW::step(double lr, double weight_decay) {
  torch::NoGradGuard guard;
  // The whole parameter list at once (foreach ops: one fused kernel per
  // operation on CUDA, the same per-tensor arithmetic on the CPU, so the
  // parity fixture still matches bit for bit). Parameters without a gradient
  // are left out, as torch.optim.AdamW does: their step counts stay behind
  // (the last layer frozen in epoch 0), so bias corrections are per parameter.
  std::vector<torch::Tensor> params, decayed, grads, m, v;
  std::vector<c10::Scalar> correction2, step_size;
  bool cpu = true;
  for (int g = 0; g < 2; ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      auto& p = groups_[g][i].param;
      if (!p.grad().defined()) continue;
      State& s = state_[g][i];
      if (!s.exp_avg.defined()) {
        s.exp_avg = torch::zeros_like(p, torch::MemoryFormat::Preserve);
        s.exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Preserve);
      }
      s.step += 1;
      params.push_back(p);
      if (g == 0) decayed.push_back(p);
      grads.push_back(p.grad());
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
      correction2.emplace_back(std::sqrt(1.0 - std::pow(o_.beta2, static_cast<double>(s.step))));
      step_size.emplace_back(-lr / (1.0 - std::pow(o_.beta1, static_cast<double>(s.step))));
      cpu = cpu && PlainCpuFloat(p) && PlainCpuFloat(p.grad()) && PlainCpuFloat(s.exp_avg) &&
            PlainCpuFloat(s.exp_avg_sq);
    }
  }
  if (params.empty()) return;
  if (cpu) {
    // One pass per parameter; group 0 (the first `decayed.size()`) decays.
    for (size_t i = 0; i < params.size(); ++i) {
      const AdamWScalars k{i < decayed.size() ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f,
                           static_cast<float>(o_.beta1),
                           static_cast<float>(1.0 - o_.beta1),
                           static_cast<float>(o_.beta2),
                           static_cast<float>(1.0 - o_.beta2),
                           correction2[i].to<float>(),
                           static_cast<float>(o_.eps),
                           step_size[i].to<float>()};
      AdamWCpu(params[i], grads[i], m[i], v[i], k);
    }
    return;
  }
  // Decoupled weight decay; group 1 (biases, 1-D) is never decayed.
  if (!decayed.empty()) torch::_foreach_mul_(decayed, 1.0 - lr * weight_decay);
  torch::_foreach_mul_(m, o_.beta1);
  torch::_foreach_add_(m, grads, 1.0 - o_.beta1);
  torch::_foreach_mul_(v, o_.beta2);
  torch::_foreach_addcmul_(v, grads, grads, 1.0 - o_.beta2);
  auto denom = torch::_foreach_sqrt(v);
  torch::_foreach_div_(denom, correction2);
  torch::_foreach_add_(denom, o_.eps);
  torch::_foreach_addcdiv_(params, m, denom, step_size);
}

void AdamW::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group) p.param.mutable_grad() = torch::Tensor();
}

void AdamW::save_state(const std::string& prefix, TensorMap& out) const {
  for (int g = 0; g < 2; ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const State& s = state_[g][i];
      const std::string base = prefix + groups_[g][i].name;
      out[base + ".step"] = torch::tensor({s.step}, torch::kInt64);
      if (s.exp_avg.defined()) {
        out[base + ".exp_avg"] = s.exp_avg;
        out[base + ".exp_avg_sq"] = s.exp_avg_sq;
      }
    }
  }
}

Status AdamW::load_state(const std::string& prefix, const TensorMap& in, const std::string& origin) {
  for (int g = 0; g < 2; ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const auto& p = groups_[g][i].param;
      const std::string base = prefix + groups_[g][i].name;
      auto st = in.find(base + ".step");
      if (st == in.end()) return Status::DataLoss(origin + ": optimizer state '" + base + ".step' is missing");
      State s;
      s.step = st->second.item<int64_t>();
      auto a = in.find(base + ".exp_avg");
      auto b = in.find(base + ".exp_avg_sq");
      if (s.step > 0) {
        if (a == in.end() || b == in.end()) {
          return Status::DataLoss(origin + ": optimizer moments of '" + groups_[g][i].name + "' are missing");
        }
        if (a->second.sizes() != p.sizes() || b->second.sizes() != p.sizes()) {
          return Status::DataLoss(origin + ": optimizer moments of '" + groups_[g][i].name + "' do not match its shape");
        }
        s.exp_avg = a->second.to(p.options()).clone();
        s.exp_avg_sq = b->second.to(p.options()).clone();
      }
      state_[g][i] = std::move(s);
    }
  }
  return Status::Ok();
}

void ClipGradients(const std::vector<NamedParam>& params, double clip) {
  torch::NoGradGuard guard;
  for (const auto& p : params) {
    auto& g = p.param.mutable_grad();
    if (!g.defined()) continue;
    // clip / (norm + 1e-6) as the reference computes it (a float32 tensor);
    // multiplying by min(coef, 1) equals "scale only when coef < 1".
    auto coef = (g.norm(2) + 1e-6).reciprocal() * clip;
    g.mul_(coef.clamp_max(1.0));
  }
}

void CancelLastLayerGradients(const std::vector<NamedParam>& params, int64_t epoch, int64_t freeze_epochs) {
  if (epoch >= freeze_epochs) return;
  for (const auto& p : params) {
    if (p.name.find("last_layer") != std::string::npos) p.param.mutable_grad() = torch::Tensor();
  }
}

void UpdateTeacher(const torch::nn::Module& student, torch::nn::Module& teacher, double m) {
  torch::NoGradGuard guard;
  auto tp = teacher.named_parameters();
  for (const auto& s : student.named_parameters()) {
    auto* t = tp.find(s.key());
    TORCH_CHECK(t != nullptr, "teacher has no parameter '", s.key(), "'");
    if (PlainCpuFloat(*t) && PlainCpuFloat(s.value())) {
      // The reference's t * m + s * (1 - m) in one pass.
      float* tp_data = t->data_ptr<float>();
      const float* sp = s.value().data_ptr<float>();
      const float keep = static_cast<float>(m), take = static_cast<float>(1.0 - m);
      ParallelFor(0, t->numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) tp_data[i] = tp_data[i] * keep + sp[i] * take;
      });
    } else {
      t->mul_(m).add_(s.value().detach() * (1.0 - m));
    }
  }
}

}  // namespace scdino::model
