// Attention-core benchmark: forward + backward of softmax(q k^T * scale) v
// from a qkv projection's output, by the per-(image, head) BLAS
// implementation (CpuAttention) and by tensor ops (TensorAttention), on the
// shapes of a DINO step's crops. Prints one JSON line with ms per
// forward + backward and GFLOP/s (the six products' multiply-adds x 2).
//
//   scdino-bench-attention [--batch 16] [--tokens 197] [--dim 192] [--heads 3]
//     [--iters 20] [--threads 2] [--impl both|cpu|tensor]
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "model/attention_core.h"
#include "launch/environment.h"

namespace {

template <typename F>
double MsPerCall(int64_t iters, const F& fn) {
  fn();  // warm-up: allocations, thread pools
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-attention",
                               "Forward + backward of the attention core, both implementations (docs/performance.md).",
                               {{"batch", "16", "images a step"},
                                {"tokens", "197", "tokens an image (197: a 224 px crop of 16 px patches, and the CLS token)"},
                                {"dim", "192", "embedding width"},
                                {"heads", "3", "attention heads"},
                                {"iters", "20", "timed forward + backward passes"},
                                {"threads", "2", "intra-op threads"},
                                {"impl", "both", "which attention to time: cpu (per-head products), tensor (LibTorch ops) or both"}});
  const int threads = scdino::run::ConfigureCpu(a.num("threads"));
  const int64_t B = a.num("batch"), N = a.num("tokens"), C = a.num("dim"), H = a.num("heads");
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / H));
  torch::manual_seed(0);
  auto qkv = torch::randn({B, N, 3 * C}).requires_grad_(true);
  auto grad = torch::randn({B, N, C});
  if (!scdino::model::CpuAttentionApplies(qkv)) {
    std::cerr << "scdino-bench-attention: no BLAS (sgemm_) in this process; CpuAttention does not apply\n";
    return 1;
  }
  auto step = [&](bool cpu) {
    qkv.mutable_grad() = torch::Tensor();
    auto out = cpu ? scdino::model::CpuAttention(qkv, H, scale) : scdino::model::TensorAttention(qkv, H, scale);
    out.backward(grad);
  };
  const int64_t iters = a.num("iters");
  const std::string impl = a.str("impl");
  if (impl != "both" && impl != "cpu" && impl != "tensor") {
    std::cerr << "scdino-bench-attention: --impl: expected both, cpu or tensor, got '" << impl << "'\n";
    return 2;
  }
  const double cpu_ms = impl != "tensor" ? MsPerCall(iters, [&] { step(true); }) : NAN;
  const double tensor_ms = impl != "cpu" ? MsPerCall(iters, [&] { step(false); }) : NAN;
  const double gflop = 6.0 * 2.0 * B * N * N * C * 1e-9;  // 2 forward + 4 backward products over all heads
  nlohmann::json out = {{"benchmark", "attention"},
                        {"batch", B},
                        {"tokens", N},
                        {"dim", C},
                        {"heads", H},
                        {"threads", threads},
                        {"gflop", gflop},
                        {"cpu_attention_ms", cpu_ms},
                        {"tensor_attention_ms", tensor_ms},
                        {"cpu_attention_gflops", gflop / cpu_ms * 1e3},
                        {"tensor_attention_gflops", gflop / tensor_ms * 1e3},
                        {"speedup", tensor_ms / cpu_ms}};
  std::cout << out.dump() << "\n";
  return 0;
}
