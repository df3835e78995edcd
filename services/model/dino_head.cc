#include "model/dino_head.h"

namespace scdino::model {

WeightNormLinearImpl::WeightNormLinearImpl(int64_t in, int64_t out, bool freeze_g) {
  // v starts as a default-initialised Linear weight, g as 1 (DINO fills g
  // with 1 after weight_norm sets it to ||v||).
  torch::nn::Linear init(torch::nn::LinearOptions(in, out).bias(false));
  weight_g = register_parameter("weight_g", torch::ones({out, 1}), /*requires_grad=*/!freeze_g);
  weight_v = register_parameter("weight_v", init->weight.detach().clone());
}

torch::Tensor WeightNormLinearImpl::forward(const torch::Tensor& x) {
  return torch::linear(x, torch::_weight_norm(weight_v, weight_g, 0));
}

DinoHeadImpl::DinoHeadImpl(const DinoHeadOptions& o) {
  TORCH_CHECK(o.nlayers() >= 1, "head nlayers must be >= 1, got ", o.nlayers());
  mlp = torch::nn::Sequential();
  auto linear = [&](int64_t in, int64_t out) {
    torch::nn::Linear l(in, out);
    TruncNormal_(l->weight, 0.02);
    torch::nn::init::zeros_(l->bias);
    mlp->push_back(l);
  };
  if (o.nlayers() == 1) {
    linear(o.in_dim(), o.bottleneck_dim());
  } else {
    linear(o.in_dim(), o.hidden_dim());
    mlp->push_back(torch::nn::GELU());
    for (int64_t i = 0; i < o.nlayers() - 2; ++i) {
      linear(o.hidden_dim(), o.hidden_dim());
      mlp->push_back(torch::nn::GELU());
    }
    linear(o.hidden_dim(), o.bottleneck_dim());
  }
  register_module("mlp", mlp);
  last_layer = register_module("last_layer", WeightNormLinear(o.bottleneck_dim(), o.out_dim(), o.norm_last_layer()));
}

torch::Tensor DinoHeadImpl::forward(const torch::Tensor& x) {
  auto y = mlp->forward(x);
  y = torch::nn::functional::normalize(y, torch::nn::functional::NormalizeFuncOptions().dim(-1).p(2));
  return last_layer(y);
}

MultiCropWrapperImpl::MultiCropWrapperImpl(VisionTransformer b, DinoHead h) {
  backbone = register_module("backbone", std::move(b));
  head = register_module("head", std::move(h));
}

MultiCropOutput MultiCropWrapperImpl::forward(const std::vector<torch::Tensor>& crops) {
  TORCH_CHECK(!crops.empty(), "multi-crop forward needs at least one crop");
  std::vector<torch::Tensor> feats;
  size_t start = 0;
  while (start < crops.size()) {
    size_t end = start + 1;
    while (end < crops.size() && crops[end].size(-1) == crops[start].size(-1)) ++end;
    std::vector<torch::Tensor> group(crops.begin() + start, crops.begin() + end);
    feats.push_back(backbone(group.size() == 1 ? group[0] : torch::cat(group)));
    start = end;
  }
  MultiCropOutput out;
  out.backbone = feats.size() == 1 ? feats[0] : torch::cat(feats);
  out.head = head(out.backbone);
  return out;
}

}  // namespace scdino::model
