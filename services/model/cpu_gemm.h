// Row-major float32 matrix products on the CPU through the libraries the
// build declared (CMake's SCDINO_CPU_GEMM, cmake/ScdinoCpuGemm.cmake):
// - oneDNN's dnnl_sgemm: faster than OpenBLAS on nearly every product of the
//   DINO step, the thin ones (K = 192 or 768) and the weight gradients'
//   3152-deep sums most (bench/gemm_libraries.py, docs/performance.md). It
//   runs on OpenMP's threads, which are LibTorch's own in Debian's build, and
//   a call made inside a parallel region runs on the calling thread alone:
//   that is what PairGemm relies on, so PairGemm exists only when LibTorch
//   and oneDNN both use OpenMP (checked at start, said by CpuGemmDescription);
// - OpenBLAS' cblas_sgemm (row-major) for CpuGemm where oneDNN is not linked.
//   Its thread pool is sized once, by ConfigureCpuGemm, and never changed
//   while products run; it serves no PairGemm (a product called from several
//   threads at once would split across its pool as well).
// With neither library, or with the run-time switch off (scdino.cpu_gemm:
// off), HasCpuGemm() and HasPairGemm() are false and callers use LibTorch's
// own ops.
//
// Thread-safety: ConfigureCpuGemm is called once at a process's start
// (run::ConfigureCpu), before any product; the products are then safe from
// any thread, every library status is checked (a failure throws
// c10::Error naming the product's shape).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <torch/torch.h>

namespace scdino::model {

/// The libraries this build linked (CMake's SCDINO_CPU_GEMM).
struct CpuGemmLibraries {
  bool onednn = false;
  bool openblas = false;
};
CpuGemmLibraries LinkedCpuGemm();

/// Sizes the thread pool of a linked OpenBLAS to `threads` (LibTorch's own
/// products use it too) and turns scdino's products on or off. Once, at
/// start.
void ConfigureCpuGemm(int threads, bool enabled);

/// Whether scdino's products are on (ConfigureCpuGemm's `enabled`; true
/// until it is called).
bool CpuGemmEnabled();

/// Turns the calling-thread product (PairGemm, the CPU attention core) on or
/// off alone; ConfigureCpuGemm sets both. For the step benchmark, which
/// counts the operator calls of the path a GPU runs: scdino's products off
/// (LibTorch's linear, as on a GPU) and the attention core one fused call
/// (as SDPA on a GPU), not LibTorch 1.13's CPU bmm, which records about nine
/// calls per matrix of a batch.
void EnablePairGemm(bool enabled);

/// Whether the whole-thread-pool product (CpuGemm) is linked and on.
bool HasCpuGemm();

/// Whether the calling-thread product (PairGemm) is linked, safe (oneDNN and
/// LibTorch share OpenMP) and on.
bool HasPairGemm();

/// What serves the products, for start-up lines and --version: e.g.
/// "oneDNN 2.6.3 sgemm (OpenMP, per-head products too); OpenBLAS 0.3.21
/// (pthreads, 2 threads)", or "LibTorch's own ops (scdino.cpu_gemm off)".
std::string CpuGemmDescription();

/// C[M x N] = alpha op(A) op(B) + beta C on the library's threads; lda, ldb
/// and ldc are row strides. Needs HasCpuGemm().
void CpuGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// The same on the calling thread alone. Needs HasPairGemm(); meant for
/// ForEachInParallel's bodies.
void PairGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc);

/// Runs fn(i) for i in [0, n) spread over LibTorch's threads (ParallelFor,
/// common/parallel.h); an exception in fn is rethrown here.
void ForEachInParallel(int64_t n, const std::function<void(int64_t)>& fn);

/// Whether Mm can use CpuGemm for these tensors: 2-D float32 on the CPU.
bool CpuGemmApplies(const torch::Tensor& a, const torch::Tensor& b);

/// op(a) op(b) for 2-D tensors: CpuGemm where it applies, torch::mm
/// otherwise. Not differentiable (for autograd functions' own passes).
torch::Tensor Mm(const torch::Tensor& a, bool trans_a, const torch::Tensor& b, bool trans_b);

/// Sets CpuGemmEnabled for a scope (tests and benchmarks compare both paths).
class ScopedCpuGemm {
 public:
  explicit ScopedCpuGemm(bool enabled);
  ~ScopedCpuGemm();
  ScopedCpuGemm(const ScopedCpuGemm&) = delete;
  ScopedCpuGemm& operator=(const ScopedCpuGemm&) = delete;

 private:
  bool was_, pair_was_;
};

}  // namespace scdino::model
