#include "model/cpu_gemm.h"

#include <atomic>

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#include "common/parallel.h"

#ifdef SCDINO_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef SCDINO_GEMM_OPENBLAS
#include <cblas.h>
#endif

namespace scdino::model {

namespace {

std::atomic<bool> g_enabled{true};
std::atomic<bool> g_pair_enabled{true};
std::atomic<int> g_blas_threads{0};  // 0: OpenBLAS's own default

#ifdef SCDINO_GEMM_ONEDNN
// oneDNN runs a product called inside a parallel region on the calling
// thread when its runtime is OpenMP, the runtime LibTorch's parallel_for
// uses in an AT_PARALLEL_OPENMP build: only then may products run side by
// side, one per LibTorch thread.
bool OneDnnSharesLibTorchThreads() {
  static const bool shared = AT_PARALLEL_OPENMP && dnnl_version()->cpu_runtime == DNNL_RUNTIME_OMP;
  return shared;
}

void CheckDnnl(dnnl_status_t status, const char* what, int64_t M, int64_t N, int64_t K) {
  TORCH_CHECK(status == dnnl_success, what, ": oneDNN's dnnl_sgemm failed with status ", static_cast<int>(status),
              " (M ", M, ", N ", N, ", K ", K, ")");
}
#endif

}  // namespace

CpuGemmLibraries LinkedCpuGemm() {
  CpuGemmLibraries l;
#ifdef SCDINO_GEMM_ONEDNN
  l.onednn = true;
#endif
#ifdef SCDINO_GEMM_OPENBLAS
  l.openblas = true;
#endif
  return l;
}

void ConfigureCpuGemm(int threads, bool enabled) {
  g_enabled = enabled;
  g_pair_enabled = enabled;
#ifdef SCDINO_GEMM_OPENBLAS
  if (threads > 0) {
    openblas_set_num_threads(threads);
    g_blas_threads = threads;
  }
#else
  (void)threads;
#endif
}

bool CpuGemmEnabled() { return g_enabled; }

bool HasCpuGemm() {
  const CpuGemmLibraries l = LinkedCpuGemm();
  return g_enabled && (l.onednn || l.openblas);
}

void EnablePairGemm(bool enabled) { g_pair_enabled = enabled; }

bool HasPairGemm() {
#ifdef SCDINO_GEMM_ONEDNN
  return g_pair_enabled && OneDnnSharesLibTorchThreads();
#else
  return false;
#endif
}

std::string CpuGemmDescription() {
  std::string d;
#ifdef SCDINO_GEMM_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  d = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
      " sgemm (" + (OneDnnSharesLibTorchThreads() ? "OpenMP, shared with LibTorch: per-head products too"
                                                  : "not LibTorch's threading: whole products only") +
      ")";
#endif
#ifdef SCDINO_GEMM_OPENBLAS
  static const char* kThreading[] = {"sequential", "pthreads", "OpenMP"};
  const int p = openblas_get_parallel();
  const int t = g_blas_threads;
  std::string version = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  version.erase(0, version.find_first_not_of(' '));
  version.erase(version.find_last_not_of(' ') + 1);
  d += (d.empty() ? "" : "; ") + version + " (" +
       (p >= 0 && p <= 2 ? kThreading[p] : "unknown threading") + ", " +
       (t > 0 ? std::to_string(t) + (t == 1 ? " thread" : " threads") : std::string("its default threads")) + ")";
#endif
  if (!g_enabled) return "LibTorch's own ops (scdino.cpu_gemm off" + (d.empty() ? "" : "; linked: " + d) + ")";
  if (d.empty()) return "LibTorch's own ops (no CPU matrix library linked: SCDINO_CPU_GEMM)";
  return d;
}

void CpuGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  TORCH_CHECK(HasCpuGemm(), "CpuGemm: no CPU matrix library is linked and on (", CpuGemmDescription(), ")");
#ifdef SCDINO_GEMM_ONEDNN
  // oneDNN takes its thread count from OpenMP's, which LibTorch sets per
  // calling thread on its first parallel call.
  at::internal::lazy_init_num_threads();
  CheckDnnl(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
            "CpuGemm", M, N, K);
#elif defined(SCDINO_GEMM_OPENBLAS)
  // OpenBLAS reports bad arguments through xerbla and returns; Mm and the
  // callers pass shapes checked against the tensors.
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb,
      (void)beta, (void)C, (void)ldc;
#endif
}

void PairGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
  TORCH_CHECK(HasPairGemm(), "PairGemm: no calling-thread product is linked and on (", CpuGemmDescription(), ")");
#ifdef SCDINO_GEMM_ONEDNN
  CheckDnnl(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
            "PairGemm", M, N, K);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb,
      (void)beta, (void)C, (void)ldc;
#endif
}

void ForEachInParallel(int64_t n, const std::function<void(int64_t)>& fn) {
  ParallelFor(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
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

ScopedCpuGemm::ScopedCpuGemm(bool enabled)
    : was_(g_enabled.exchange(enabled)), pair_was_(g_pair_enabled.exchange(enabled)) {}
ScopedCpuGemm::~ScopedCpuGemm() {
  g_enabled = was_;
  g_pair_enabled = pair_was_;
}

}  // namespace scdino::model
