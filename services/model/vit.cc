#include "model/vit.h"

#include <cmath>

#include "model/attention_core.h"
#include "model/linear.h"

namespace scdino::model {

namespace F = torch::nn::functional;

VitOptions VitOptions::Preset(const std::string& arch) {
  VitOptions o;
  if (arch == "vit_tiny") return o.embed_dim(192).depth(12).num_heads(3);
  if (arch == "vit_small") return o.embed_dim(384).depth(12).num_heads(6);
  if (arch == "vit_base") return o.embed_dim(768).depth(12).num_heads(12);
  TORCH_CHECK(false, "unknown ViT architecture '", arch,
              "': expected vit_tiny, vit_small or vit_base (or set embed_dim, depth and num_heads)");
}

void TruncNormal_(torch::Tensor t, double std) {
  torch::NoGradGuard guard;
  const double a = -2.0, b = 2.0;
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  double l = cdf(a / std), u = cdf(b / std);
  t.uniform_(2 * l - 1, 2 * u - 1);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.clamp_(a, b);
}

static void InitLinear(torch::nn::Linear& l) {
  TruncNormal_(l->weight, 0.02);
  if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
}

AttentionImpl::AttentionImpl(int64_t dim, int64_t heads, bool qkv_bias)
    : num_heads(heads), scale(std::pow(static_cast<double>(dim / heads), -0.5)) {
  TORCH_CHECK(dim % heads == 0, "embed_dim ", dim, " is not divisible by num_heads ", heads);
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(dim, 3 * dim).bias(qkv_bias)));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
  InitLinear(qkv);
  InitLinear(proj);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, torch::Tensor* probs) {
  return Linear(proj, AttentionCore(Linear(qkv, x), num_heads, scale, probs));
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
  InitLinear(fc1);
  InitLinear(fc2);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return Linear(fc2, torch::gelu(Linear(fc1, x))); }

BlockImpl::BlockImpl(const VitOptions& o, double dp) : drop_path(dp) {
  auto ln = torch::nn::LayerNormOptions({o.embed_dim()}).eps(o.layer_norm_eps());
  norm1 = register_module("norm1", torch::nn::LayerNorm(ln));
  attn = register_module("attn", Attention(o.embed_dim(), o.num_heads(), o.qkv_bias()));
  norm2 = register_module("norm2", torch::nn::LayerNorm(ln));
  mlp = register_module("mlp", Mlp(o.embed_dim(), static_cast<int64_t>(o.embed_dim() * o.mlp_ratio())));
}

// x + branch with stochastic depth: each sample's whole branch is dropped
// with probability drop_path and the kept ones are rescaled, as DINO's
// DropPath (same random draws); the rescaling and the residual sum in one
// pass (addcmul) instead of a division, a product and a sum.
static torch::Tensor AddDropPath(const torch::Tensor& x, const torch::Tensor& branch, double p, bool training) {
  if (p == 0.0 || !training) return x + branch;
  const double keep = 1.0 - p;
  auto scale = (keep + torch::rand({branch.size(0), 1, 1}, branch.options())).floor_().div_(keep);
  return torch::addcmul(x, branch, scale);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto y = AddDropPath(x, attn(norm1(x)), drop_path, is_training());
  return AddDropPath(y, mlp(norm2(y)), drop_path, is_training());
}

torch::Tensor BlockImpl::attention_probs(const torch::Tensor& x) {
  torch::Tensor probs;
  attn->forward(norm1(x), &probs);
  return probs;
}

PatchEmbedImpl::PatchEmbedImpl(int64_t in_chans, int64_t embed_dim, int64_t p) : patch_(p) {
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_chans, embed_dim, p).stride(p)));
}

torch::Tensor PatchEmbedImpl::forward(const torch::Tensor& x) {
  // The convolution of stride p as what it is, one matrix product over the
  // patches (no cuDNN call on a GPU): each patch's C x p x p pixels, in the
  // order of the kernel's layout, against the kernel flattened alike.
  const int64_t B = x.size(0), C = x.size(1), gh = x.size(2) / patch_, gw = x.size(3) / patch_;
  const auto patches = x.reshape({B, C, gh, patch_, gw, patch_})
                           .permute({0, 2, 4, 1, 3, 5})
                           .reshape({B, gh * gw, C * patch_ * patch_});
  return Linear(patches, proj->weight.view({proj->weight.size(0), -1}), proj->bias);
}

VisionTransformerImpl::VisionTransformerImpl(VitOptions options) : options_(std::move(options)) { reset(); }

void VisionTransformerImpl::reset() {
  const auto& o = options_;
  TORCH_CHECK(o.in_chans() > 0 && o.patch_size() > 0 && o.depth() > 0 && o.embed_dim() > 0,
              "ViT needs positive in_chans, patch_size, depth and embed_dim");
  TORCH_CHECK(o.img_size() % o.patch_size() == 0, "global crop size ", o.img_size(),
              " is not a multiple of patch_size ", o.patch_size());
  const int64_t grid = o.img_size() / o.patch_size();
  patch_embed_ = register_module("patch_embed", PatchEmbed(o.in_chans(), o.embed_dim(), o.patch_size()));
  cls_token_ = register_parameter("cls_token", torch::zeros({1, 1, o.embed_dim()}));
  pos_embed_ = register_parameter("pos_embed", torch::zeros({1, grid * grid + 1, o.embed_dim()}));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  // Same per-block rates as torch.linspace(0, drop_path_rate, depth).
  auto dpr = torch::linspace(0.0, o.drop_path_rate(), o.depth(), torch::kFloat32);
  for (int64_t i = 0; i < o.depth(); ++i) blocks_->push_back(Block(o, dpr[i].item<float>()));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.embed_dim()}).eps(o.layer_norm_eps())));
  TruncNormal_(pos_embed_, 0.02);
  TruncNormal_(cls_token_, 0.02);
}

torch::Tensor VisionTransformerImpl::interpolate_pos_encoding(int64_t npatch, int64_t w, int64_t h) {
  const int64_t N = pos_embed_.size(1) - 1;
  if (npatch == N && w == h) return pos_embed_;
  const int64_t dim = pos_embed_.size(-1);
  auto class_pos = pos_embed_.select(1, 0);
  auto patch_pos = pos_embed_.slice(1, 1);
  // The reference adds 0.1 so that floor(size * scale) lands on the wanted
  // grid despite floating-point error; the same scale factors are passed on.
  const double w0 = static_cast<double>(w / options_.patch_size()) + 0.1;
  const double h0 = static_cast<double>(h / options_.patch_size()) + 0.1;
  const double sqrt_n = std::sqrt(static_cast<double>(N));
  const int64_t side = static_cast<int64_t>(sqrt_n);
  patch_pos = F::interpolate(patch_pos.reshape({1, side, side, dim}).permute({0, 3, 1, 2}),
                             F::InterpolateFuncOptions()
                                 .scale_factor(std::vector<double>{w0 / sqrt_n, h0 / sqrt_n})
                                 .mode(torch::kBicubic)
                                 .align_corners(false)
                                 .recompute_scale_factor(false));
  TORCH_CHECK(static_cast<int64_t>(w0) == patch_pos.size(-2) && static_cast<int64_t>(h0) == patch_pos.size(-1),
              "position embedding interpolation gave ", patch_pos.sizes(), " for a ", w, "x", h, " input");
  patch_pos = patch_pos.permute({0, 2, 3, 1}).reshape({1, -1, dim});
  return torch::cat({class_pos.unsqueeze(0), patch_pos}, 1);
}

torch::Tensor VisionTransformerImpl::prepare_tokens(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options_.in_chans(), "ViT expects [B, ", options_.in_chans(),
              ", H, W] input, got ", x.sizes());
  TORCH_CHECK(x.size(2) % options_.patch_size() == 0 && x.size(3) % options_.patch_size() == 0,
              "crop size ", x.size(2), "x", x.size(3), " is not a multiple of patch_size ", options_.patch_size());
  const int64_t B = x.size(0), w = x.size(2), h = x.size(3);
  auto tokens = patch_embed_(x);
  tokens = torch::cat({cls_token_.expand({B, -1, -1}), tokens}, 1);
  return tokens + interpolate_pos_encoding(tokens.size(1) - 1, w, h);
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& x) {
  auto t = prepare_tokens(x);
  for (const auto& blk : *blocks_) t = blk->as<Block>()->forward(t);
  return norm_(t).select(1, 0);
}

torch::Tensor VisionTransformerImpl::last_self_attention(const torch::Tensor& x,
                                                         const std::function<bool()>& should_stop) {
  auto t = prepare_tokens(x);
  const size_t n = blocks_->size();
  for (size_t i = 0; i + 1 < n; ++i) {
    if (should_stop && should_stop()) return {};
    t = blocks_[i]->as<Block>()->forward(t);
  }
  if (should_stop && should_stop()) return {};
  return blocks_[n - 1]->as<Block>()->attention_probs(t);
}

}  // namespace scdino::model
