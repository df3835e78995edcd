// Fully connected layers of the ViT and the DINO head: y = x W^T + b over
// the last dimension, as torch::nn::Linear computes it, with forward and
// backward on oneDNN's sgemm for float32 CPU tensors (cpu_gemm.h: faster
// than the BLAS LibTorch sends these products to) and torch::linear
// everywhere else (CUDA, other dtypes, autocast, builds without oneDNN).
// tests/model/linear_test.cc checks values and gradients against
// torch::linear. Stateless; thread-safe.
#pragma once

#include <torch/torch.h>

namespace scdino::model {

/// x [..., in] by weight [out, in] plus bias [out] (may be undefined).
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// The layer's parameters applied with Linear.
torch::Tensor Linear(const torch::nn::Linear& layer, const torch::Tensor& x);

/// Whether Linear takes the oneDNN path for these tensors.
bool CpuLinearApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace scdino::model
