#include "model/flat_params.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

namespace scdino::model {

bool DecaysWeight(const std::string& name, const torch::Tensor& param) {
  const std::string bias = ".bias";
  const bool is_bias = name.size() >= bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0;
  return !is_bias && param.dim() != 1;
}

FlatParameters::FlatParameters(torch::nn::Module& module) {
  // Reverse registration order, the trainable parameters first.
  std::vector<NamedParam> ordered;
  std::vector<bool> trainable;
  const auto named = module.named_parameters();
  for (bool want : {true, false}) {
    for (auto it = named.end(); it != named.begin();) {
      --it;
      if (it->value().requires_grad() != want) continue;
      ordered.push_back({it->key(), it->value()});
      trainable.push_back(want);
    }
  }
  Build(ordered, trainable);
}

FlatParameters::FlatParameters(torch::nn::Module& module, const FlatParameters& like) {
  auto named = module.named_parameters();
  std::vector<NamedParam> ordered;
  std::vector<bool> trainable;
  for (const auto& e : like.entries()) {
    auto* p = named.find(e.p.name);
    TORCH_CHECK(p != nullptr, "flat parameters: the module has no parameter '", e.p.name, "'");
    TORCH_CHECK(p->sizes() == e.p.param.sizes(), "flat parameters: '", e.p.name, "' has shape ", p->sizes(),
                ", the layout's is ", e.p.param.sizes());
    ordered.push_back({e.p.name, *p});
    trainable.push_back(e.trainable && p->requires_grad());
  }
  TORCH_CHECK(ordered.size() == named.size(), "flat parameters: the module has ", named.size(),
              " parameters, the layout ", ordered.size());
  Build(ordered, trainable);
}

void FlatParameters::Build(const std::vector<NamedParam>& ordered, const std::vector<bool>& trainable) {
  torch::NoGradGuard guard;
  TORCH_CHECK(!ordered.empty(), "flat parameters: the module has no parameters");
  const auto options = ordered.front().param.options();
  int64_t total = 0;
  for (size_t i = 0; i < ordered.size(); ++i) {
    const auto& p = ordered[i].param;
    TORCH_CHECK(p.device() == options.device() && p.scalar_type() == options.dtype(), "flat parameters: '",
                ordered[i].name, "' is ", p.scalar_type(), " on ", p.device(), ", the first parameter ",
                options.dtype(), " on ", options.device());
    Entry e;
    e.p = ordered[i];
    e.offset = total;
    e.numel = p.numel();
    e.trainable = trainable[i];
    e.decay = DecaysWeight(e.p.name, p);
    total += e.numel;
    if (e.trainable) trainable_numel_ = total;
    entries_.push_back(e);
  }
  values_ = torch::empty({total}, options.requires_grad(false));
  for (auto& e : entries_) {
    auto slot = values_.narrow(0, e.offset, e.numel);
    slot.copy_(e.p.param.detach().reshape({-1}));
    e.p.param.set_data(slot.view(e.p.param.sizes()));
    if (e.trainable) trainable_.push_back(e.p);
  }
  trainable_values_ = values_.narrow(0, 0, trainable_numel_);
  if (trainable_numel_ == 0) return;
  grads_ = torch::zeros({trainable_numel_}, values_.options());
  for (const auto& e : entries_) {
    if (e.trainable) grad_views_.push_back(grads_.narrow(0, e.offset, e.numel).view(e.p.param.sizes()));
  }
  // Segments: the members of each class in layout order, split wherever the
  // distance to the next member changes.
  // A class is one name pattern (the block index left out), shape and decay.
  std::map<std::tuple<std::string, std::vector<int64_t>, bool>, std::vector<size_t>> classes;
  for (size_t i = 0; i < trainable_.size(); ++i) {
    std::string pattern;
    for (char ch : entries_[i].p.name) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) pattern += ch;
      else if (pattern.empty() || pattern.back() != '#') pattern += '#';
    }
    classes[{pattern, entries_[i].p.param.sizes().vec(), entries_[i].decay}].push_back(i);
  }
  for (const auto& [key, members] : classes) {
    Segment s;
    for (size_t i : members) {
      const auto& e = entries_[i];
      const bool fits = s.members.empty() || (s.members.size() == 1 ? e.offset > s.offset
                                                                      : e.offset - entries_[s.members.back()].offset == s.stride);
      if (!fits) {
        segments_.push_back(s);
        s = Segment();
      }
      if (s.members.empty()) {
        s.offset = e.offset;
        s.numel = e.numel;
        s.decay = e.decay;
      } else if (s.members.size() == 1) {
        s.stride = e.offset - s.offset;
      }
      s.members.push_back(i);
    }
    segments_.push_back(s);
  }
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
}

torch::Tensor FlatParameters::SegmentView(const torch::Tensor& flat, const Segment& s) const {
  const int64_t count = static_cast<int64_t>(s.members.size());
  return flat.as_strided({count, s.numel}, {count > 1 ? s.stride : s.numel, 1}, flat.storage_offset() + s.offset);
}

void FlatParameters::ZeroGrads() {
  if (!grads_.defined()) return;
  grads_.zero_();
  for (size_t i = 0; i < trainable_.size(); ++i) trainable_[i].param.mutable_grad() = grad_views_[i];
}

bool FlatParameters::GradInPlace(size_t i) {
  auto& p = trainable_[i].param;
  const auto& g = p.grad();
  if (!g.defined()) return false;
  if (g.is_same(grad_views_[i])) return true;
  torch::NoGradGuard guard;
  grad_views_[i].copy_(g);
  p.mutable_grad() = grad_views_[i];
  return true;
}

}  // namespace scdino::model
