// DINO projection head and the multi-crop wrapper (backbone + head), with the
// reference parameter names (head.mlp.{0,2,4}.*, head.last_layer.weight_{g,v}).
// A module is not thread-safe: one thread trains or runs it at a time.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/vit.h"

namespace scdino::model {

/// Example: DinoHeadOptions(384, 65536).hidden_dim(2048).bottleneck_dim(256)
struct DinoHeadOptions {
  DinoHeadOptions(int64_t in_dim, int64_t out_dim) : in_dim_(in_dim), out_dim_(out_dim) {}
  /// Input width: the backbone's embed_dim.
  TORCH_ARG(int64_t, in_dim);
  /// Prototypes (scDINO default 65536).
  TORCH_ARG(int64_t, out_dim);
  TORCH_ARG(int64_t, hidden_dim) = 2048;
  TORCH_ARG(int64_t, bottleneck_dim) = 256;
  /// Linear layers before the last one (>= 1).
  TORCH_ARG(int64_t, nlayers) = 3;
  /// Keep the last layer's weight_g at 1 and frozen.
  TORCH_ARG(bool, norm_last_layer) = true;
};

/// Linear layer without bias, weight = weight_g * weight_v / ||weight_v||
/// (row-wise), as torch.nn.utils.weight_norm(dim=0).
struct WeightNormLinearImpl : torch::nn::Module {
  WeightNormLinearImpl(int64_t in, int64_t out, bool freeze_g);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight_g, weight_v;
};
TORCH_MODULE(WeightNormLinear);

struct DinoHeadImpl : torch::nn::Module {
  explicit DinoHeadImpl(const DinoHeadOptions& o);
  /// MLP, L2 normalisation, weight-normalised last layer.
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Sequential mlp{nullptr};
  WeightNormLinear last_layer{nullptr};
};
TORCH_MODULE(DinoHead);

struct MultiCropOutput {
  torch::Tensor backbone;  ///< CLS features, crops in input order, concatenated on dim 0
  torch::Tensor head;      ///< head outputs, same order
};

/// Runs the backbone once per group of consecutive crops of equal size (2
/// globals, then the locals) and the head once on the concatenation.
struct MultiCropWrapperImpl : torch::nn::Module {
  MultiCropWrapperImpl(VisionTransformer backbone, DinoHead head);
  MultiCropOutput forward(const std::vector<torch::Tensor>& crops);
  VisionTransformer backbone{nullptr};
  DinoHead head{nullptr};
};
TORCH_MODULE(MultiCropWrapper);

}  // namespace scdino::model
