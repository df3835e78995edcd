// Row-major float32 matrix products on the CPU through the GEMMs the process
// already has loaded, found at run time (dlsym), so that the library builds
// against any LibTorch:
// - oneDNN's `dnnl_sgemm` (Debian's LibTorch links libdnnl.so.2 for its
//   convolutions but sends fp32 products to the BLAS): faster than OpenBLAS
//   on nearly every product of the DINO step, the thin ones (K = 192 or
//   768) and the weight gradients' 3152-deep sums most
//   (bench/gemm_libraries.py, docs/performance.md), on the same OpenMP
//   threads as LibTorch's own kernels. Called inside a parallel region it
//   runs on the calling thread: the small per-(image, head) products that
//   run side by side (PairGemm, ForEachInParallel) use that too;
// - the Fortran BLAS `sgemm_` LibTorch links (OpenBLAS on Debian), one
//   thread per call, for PairGemm where oneDNN is missing.
// Builds whose LibTorch carries a private copy of both (the pip wheels)
// find neither: CpuGemmApplies() is false and callers use tensor ops.
// Stateless apart from the symbols looked up once; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <torch/torch.h>

namespace scdino::model {

/// Whether the whole-thread-pool product (CpuGemm) exists in this process.
bool HasCpuGemm();

/// Whether the one-thread product (PairGemm) exists in this process.
bool HasPairGemm();

/// Which libraries the products use, for logs: e.g. "oneDNN sgemm; OpenBLAS
/// (OpenMP)", or "tensor ops" when none was found.
std::string CpuGemmDescription();

/// C[M x N] = alpha op(A) op(B) + beta C on LibTorch's threads; lda, ldb
/// and ldc are row strides. Needs HasCpuGemm().
void CpuGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// The same on the calling thread alone. Needs HasPairGemm(); meant for
/// ForEachInParallel's bodies.
void PairGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc);

/// Runs fn(i) for i in [0, n) spread over LibTorch's threads, with a BLAS
/// that has its own thread pool held to one thread meanwhile (otherwise it
/// would split products that already run side by side).
void ForEachInParallel(int64_t n, const std::function<void(int64_t)>& fn);

/// Whether Mm can use CpuGemm for these tensors: 2-D float32 on the CPU.
bool CpuGemmApplies(const torch::Tensor& a, const torch::Tensor& b);

/// op(a) op(b) for 2-D tensors: CpuGemm where it applies, torch::mm
/// otherwise. Not differentiable (for autograd functions' own passes).
torch::Tensor Mm(const torch::Tensor& a, bool trans_a, const torch::Tensor& b, bool trans_b);

}  // namespace scdino::model
