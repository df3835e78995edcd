// The core of multi-head self-attention, softmax(q k^T * scale) v, from the
// qkv projection's output [B, N, 3C] (per token [3, heads, C / heads], as
// DINO's qkv linear writes it) to the heads merged as [B, N, C].
//
// Three implementations of one function. FusedAttention: LibTorch 2.x's
// scaled_dot_product_attention (flash or memory-efficient kernels on sm80+
// GPUs; no [N, N] probabilities kept for backward), used on CUDA where the
// LibTorch has it. TensorAttention: tensor ops (split
// the heads, two batched products, merge), any device and dtype, and the one
// that can hand out the probabilities. CpuAttention: forward and backward as
// per-(image, head) BLAS products that read q, k and v straight out of the
// qkv projection's output and write into the merged [B, N, C] layout: no
// head split or merge copies, no per-matrix select loop (LibTorch 1.13's CPU
// bmm without MKL), the softmax scale folded into the products. Used for
// float32 CPU tensors when the build has a calling-thread product
// (cpu_gemm.h's PairGemm: oneDNN's sgemm on LibTorch's OpenMP threads, and
// scdino.cpu_gemm on); tests/model/attention_core_test.cc checks that all three give
// the same values and gradients (the fused one on the CPU, in a LibTorch 2.x
// build: the GPU image's unit tests), bench/attention_bench.cc times them.
// Stateless; safe to call from one thread at a time per autograd graph.
#pragma once

#include <torch/torch.h>

namespace scdino::model {

/// The attention core by the fastest implementation that applies; `probs`,
/// when given, receives the probabilities [B, heads, N, N].
torch::Tensor AttentionCore(const torch::Tensor& qkv, int64_t num_heads, double scale, torch::Tensor* probs = nullptr);

/// Whether this LibTorch has the fused attention (2.1 and later).
bool FusedAttentionAvailable();

/// LibTorch's scaled_dot_product_attention on any device and dtype; needs
/// FusedAttentionAvailable().
torch::Tensor FusedAttention(const torch::Tensor& qkv, int64_t num_heads, double scale);

/// The tensor-op implementation (any device and dtype).
torch::Tensor TensorAttention(const torch::Tensor& qkv, int64_t num_heads, double scale,
                              torch::Tensor* probs = nullptr);

/// Whether CpuAttention can run on `qkv`: a float32 CPU tensor and a GEMM.
bool CpuAttentionApplies(const torch::Tensor& qkv);

/// The per-(image, head) BLAS implementation, differentiable with respect
/// to qkv. Needs CpuAttentionApplies(qkv).
torch::Tensor CpuAttention(const torch::Tensor& qkv, int64_t num_heads, double scale);

}  // namespace scdino::model
