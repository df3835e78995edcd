// Vision Transformer for N-channel images (DINO's vision_transformer.py):
// pre-norm blocks, LayerNorm eps 1e-6, GELU MLP, stochastic depth, CLS token
// output after the final norm. Parameter names equal the reference state_dict
// names (patch_embed.proj.*, blocks.{i}.attn.qkv.*, ...).
// A module is not thread-safe: one thread trains or runs it at a time.
#pragma once

#include <functional>

#include <torch/torch.h>

#include <string>

namespace scdino::model {

/// Shape of a ViT. Example:
///   auto o = VitOptions::Preset("vit_small").in_chans(5).patch_size(16);
struct VitOptions {
  /// vit_tiny (192/12/3), vit_small (384/12/6), vit_base (768/12/12).
  /// Throws naming the architecture when it is none of these.
  static VitOptions Preset(const std::string& arch);

  /// Image channels (5 for the reference PBMC set).
  TORCH_ARG(int64_t, in_chans) = 3;
  /// Square patch side in pixels.
  TORCH_ARG(int64_t, patch_size) = 16;
  /// Crop size the position embedding is built for (the global crop size).
  TORCH_ARG(int64_t, img_size) = 224;
  TORCH_ARG(int64_t, embed_dim) = 384;
  TORCH_ARG(int64_t, depth) = 12;
  TORCH_ARG(int64_t, num_heads) = 6;
  /// Hidden width of each block's MLP, as a multiple of embed_dim.
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, qkv_bias) = true;
  TORCH_ARG(double, layer_norm_eps) = 1e-6;
  /// Stochastic depth of the last block; rises linearly from 0 at the first.
  TORCH_ARG(double, drop_path_rate) = 0.0;
};

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(int64_t dim, int64_t num_heads, bool qkv_bias);
  /// Self-attention; when `probs` is given it receives the softmax
  /// probabilities [B, heads, tokens, tokens].
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* probs = nullptr);

  int64_t num_heads;
  double scale;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl(const VitOptions& o, double drop_path);
  torch::Tensor forward(const torch::Tensor& x);
  /// The attention probabilities of this block for input tokens `x`.
  torch::Tensor attention_probs(const torch::Tensor& x);

  double drop_path;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

/// DINO's patch embedding: a p x p convolution of stride p, computed as one
/// matrix product over the patches. Its weight stays the convolution's
/// ([D, C, p, p] under DINO's name, patch_embed.proj.weight), so
/// checkpoints, the parity fixture and DINO's own ViT read it unchanged.
struct PatchEmbedImpl : torch::nn::Module {
  PatchEmbedImpl(int64_t in_chans, int64_t embed_dim, int64_t patch_size);
  /// [B, C, H, W] -> [B, (H/p)*(W/p), D]
  torch::Tensor forward(const torch::Tensor& x);
  /// Holds the parameters; its own forward (a convolution) is never called.
  torch::nn::Conv2d proj{nullptr};

 private:
  int64_t patch_;
};
TORCH_MODULE(PatchEmbed);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit VisionTransformerImpl(VitOptions options);
  void reset();

  /// CLS token after the final norm: [B, C, H, W] -> [B, embed_dim].
  torch::Tensor forward(const torch::Tensor& x);
  /// Last block's self-attention probabilities [B, heads, tokens, tokens].
  /// `should_stop` is asked before each block: true there returns an
  /// undefined tensor (a map over many tokens takes minutes per image).
  torch::Tensor last_self_attention(const torch::Tensor& x, const std::function<bool()>& should_stop = nullptr);
  /// Position embedding for a w x h input, bicubically interpolated from the
  /// grid built for img_size exactly as the reference (with its +0.1 offset).
  torch::Tensor interpolate_pos_encoding(int64_t npatch, int64_t w, int64_t h);

  const VitOptions& options() const { return options_; }

 private:
  torch::Tensor prepare_tokens(const torch::Tensor& x);

  VitOptions options_;
  PatchEmbed patch_embed_{nullptr};
  torch::Tensor cls_token_, pos_embed_;
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(VisionTransformer);

/// DINO's trunc_normal_(t, std=std, a=-2, b=2), in place.
void TruncNormal_(torch::Tensor t, double std);

}  // namespace scdino::model
