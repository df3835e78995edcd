#include "model/dino_head.h"

#include "model/cpu_gemm.h"
#include "model/linear.h"
#include "model/precision.h"

namespace scdino::model {

namespace {

// y = (x v^T) * (g / ||v||)^T: the row norms scale the product's columns
// instead of a normalised copy of v (at out_dim 65536 x 256 a 64 MiB tensor
// per network and step, and its backward another). Backward, with
// z = x v^T, s = sum over rows of dy * z and gz = dy * g / ||v||:
//   dx = gz v,   dv = gz^T x - (s g / ||v||^3) v  (in place),   dg = s / ||v||.
class NormalizedLinearFunction : public torch::autograd::Function<NormalizedLinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& v,
                               const torch::Tensor& g) {
    auto norm = v.norm(2, 1);
    auto column_scale = g.reshape({-1}) / norm;
    auto x2 = x.reshape({-1, x.size(-1)});
    auto z = Mm(x2, false, v, true);
    ctx->save_for_backward({x2, v, g, norm, column_scale, z});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = v.size(0);
    return (z * column_scale).reshape(out_sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &v = saved[1], &g = saved[2], &norm = saved[3], &column_scale = saved[4],
               &z = saved[5];
    auto dy = grads[0].reshape({-1, v.size(0)});
    auto gz = dy * column_scale;
    torch::Tensor dx, dv, dg;
    if (ctx->needs_input_grad(0)) dx = Mm(gz, false, v, false).reshape(ctx->saved_data["x_sizes"].toIntVector());
    const bool need_v = ctx->needs_input_grad(1), need_g = ctx->needs_input_grad(2);
    if (need_v || need_g) {
      auto s = (dy * z).sum(0);
      if (need_v) {
        dv = Mm(gz, true, x2, false);
        dv.addcmul_(v, (s * g.reshape({-1}) / norm.pow(3)).unsqueeze(1), -1.0);
      }
      if (need_g) dg = (s / norm).reshape(g.sizes());
    }
    return {dx, dv, dg};
  }
};

}  // namespace

WeightNormLinearImpl::WeightNormLinearImpl(int64_t in, int64_t out, bool freeze_g) {
  // v starts as a default-initialised Linear weight, g as 1 (DINO fills g
  // with 1 after weight_norm sets it to ||v||).
  torch::nn::Linear init(torch::nn::LinearOptions(in, out).bias(false));
  weight_g = register_parameter("weight_g", torch::ones({out, 1}), /*requires_grad=*/!freeze_g);
  weight_v = register_parameter("weight_v", init->weight.detach().clone());
}

torch::Tensor WeightNormLinearImpl::forward(const torch::Tensor& x) {
  // Under autocast the products run in bf16/fp16, which the function's
  // backward does not follow: the plain weight norm there (GPU runs).
  if (AutocastActive(x.device().type()) || x.scalar_type() != weight_v.scalar_type()) {
    return torch::linear(x, torch::_weight_norm(weight_v, weight_g, 0));
  }
  return NormalizedLinearFunction::apply(x, weight_v, weight_g);
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
  torch::Tensor y = x;
  for (const auto& layer : mlp->children()) {
    if (auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(layer)) {
      y = Linear(y, linear->weight, linear->bias);
    } else {
      auto* gelu = layer->as<torch::nn::GELU>();
      TORCH_CHECK(gelu != nullptr, "DinoHead: unexpected layer ", layer->name(), " in the MLP");
      y = gelu->forward(y);
    }
  }
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
