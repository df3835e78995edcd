#include "model/cpu_gemm.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace scdino::model {

namespace {

// oneDNN's C entry (row-major; dnnl_dim_t is int64_t; returns a status).
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
// The Fortran BLAS entry (column-major).
using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);
using SetThreads = void (*)(int);
using GetInt = int (*)();

template <typename T>
T Lookup(const char* name) {
  return reinterpret_cast<T>(::dlsym(RTLD_DEFAULT, name));
}

struct Libraries {
  DnnlSgemm dnnl_sgemm = Lookup<DnnlSgemm>("dnnl_sgemm");
  Sgemm sgemm = Lookup<Sgemm>("sgemm_");
  SetThreads set_threads = Lookup<SetThreads>("openblas_set_num_threads");
  GetInt get_threads = Lookup<GetInt>("openblas_get_num_threads");
  // 0 sequential, 1 its own pthreads pool, 2 OpenMP. The OpenMP build runs
  // a product called inside a parallel region on the calling thread by
  // itself, and there openblas_set_num_threads would set OpenMP's thread
  // count, LibTorch's too.
  GetInt get_parallel = Lookup<GetInt>("openblas_get_parallel");
  bool own_pool() const {
    return set_threads != nullptr && get_threads != nullptr && get_parallel != nullptr && get_parallel() == 1;
  }
};

const Libraries& Libs() {
  static const Libraries libs;
  return libs;
}

}  // namespace

bool HasCpuGemm() { return Libs().dnnl_sgemm != nullptr; }

bool HasPairGemm() { return Libs().dnnl_sgemm != nullptr || Libs().sgemm != nullptr; }

std::string CpuGemmDescription() {
  const Libraries& l = Libs();
  std::string d = l.dnnl_sgemm != nullptr ? "oneDNN sgemm" : "tensor ops";
  if (l.sgemm == nullptr) return d + "; no Fortran BLAS";
  if (l.get_parallel == nullptr) return d + "; BLAS sgemm_";
  static const char* kThreading[] = {"sequential", "pthreads", "OpenMP"};
  const int p = l.get_parallel();
  return d + "; OpenBLAS (" + (p >= 0 && p <= 2 ? kThreading[p] : "unknown threading") + ")";
}

void CpuGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  TORCH_CHECK(HasCpuGemm(), "CpuGemm needs oneDNN's dnnl_sgemm in the process");
  // oneDNN takes its thread count from OpenMP's, which LibTorch sets per
  // calling thread on its first parallel call.
  at::internal::lazy_init_num_threads();
  const int status = Libs().dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                       C, ldc);
  TORCH_CHECK(status == 0, "dnnl_sgemm failed with status ", status, " (M ", M, ", N ", N, ", K ", K, ")");
}

void PairGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
  const Libraries& l = Libs();
  if (l.dnnl_sgemm != nullptr) {
    // Inside a parallel region oneDNN runs the product on the calling thread.
    l.dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T.
  l.sgemm(trans_b ? "T" : "N", trans_a ? "T" : "N", &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
}

void ForEachInParallel(int64_t n, const std::function<void(int64_t)>& fn) {
  const Libraries& l = Libs();
  const int blas_threads = l.own_pool() ? l.get_threads() : 1;
  if (blas_threads > 1) l.set_threads(1);
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
  if (blas_threads > 1) l.set_threads(blas_threads);
}

bool CpuGemmApplies(const torch::Tensor& a, const torch::Tensor& b) {
  return HasCpuGemm() && a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == torch::kFloat32 &&
         b.scalar_type() == torch::kFloat32 && a.dim() == 2 && b.dim() == 2;
}

torch::Tensor Mm(const torch::Tensor& a, bool trans_a, const torch::Tensor& b, bool trans_b) {
  if (!CpuGemmApplies(a, b)) return torch::mm(trans_a ? a.t() : a, trans_b ? b.t() : b);
  auto ac = a.contiguous(), bc = b.contiguous();
  const int64_t M = trans_a ? ac.size(1) : ac.size(0), K = trans_a ? ac.size(0) : ac.size(1);
  const int64_t N = trans_b ? bc.size(0) : bc.size(1);
  TORCH_CHECK((trans_b ? bc.size(1) : bc.size(0)) == K, "Mm: inner sizes differ, ", a.sizes(), trans_a ? "^T" : "",
              " by ", b.sizes(), trans_b ? "^T" : "");
  auto c = torch::empty({M, N}, ac.options());
  if (M == 0 || N == 0) return c;
  if (K == 0) return c.zero_();
  CpuGemm(trans_a, trans_b, M, N, K, 1.f, ac.data_ptr<float>(), ac.size(1), bc.data_ptr<float>(), bc.size(1), 0.f,
          c.data_ptr<float>(), N);
  return c;
}

}  // namespace scdino::model
