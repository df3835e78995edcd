// Weighted-kNN benchmark: test queries/s of scdino-eval's classifier (cosine
// similarity as chunked matrix products, top-k, exp(sim / T) votes for every
// k of the list) on random L2-normalised features. Prints one JSON line.
//
//   scdino-bench-knn [--train 90000] [--test 22000] [--dim 384] [--classes 10]
//     [--memory-mb 512] [--threads 0] [--device cpu|cuda]
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "eval/knn.h"
#include "launch/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-knn", "Queries/s of the weighted kNN (docs/performance.md).",
                               {{"train", "90000", "train rows"},
                                {"test", "22000", "test rows (queries)"},
                                {"dim", "384", "feature width"},
                                {"classes", "10", "classes"},
                                {"memory-mb", "512", "memory for one block of similarities, MiB (scdino.evaluation.knn_memory_mb)"},
                                {"threads", "0", "intra-op threads (0: all cores)"},
                                {"device", "cpu", "cpu or cuda"}});
  auto num = [&](const char* k) { return a.num(k); };
  const int threads = scdino::run::ConfigureCpu(num("threads"));
  torch::Device device = a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU;
  torch::manual_seed(0);
  auto unit = [&](int64_t n) {
    auto x = torch::randn({n, num("dim")});
    return (x / x.norm(2, 1, true)).to(device);
  };
  auto train = unit(num("train")), test = unit(num("test"));
  auto labels = torch::randint(0, num("classes"), {num("train")}, torch::kInt64).to(device);
  scdino::eval::KnnOptions o;
  o.memory_bytes = num("memory-mb") << 20;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = scdino::eval::WeightedKnn(train, labels, test, num("classes"), o);
  if (device.is_cuda()) torch::cuda::synchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out = {{"benchmark", "knn"},
                        {"train", num("train")},
                        {"test", num("test")},
                        {"dim", num("dim")},
                        {"ks", o.ks},
                        {"chunk", r.chunk},
                        {"memory_mb", num("memory-mb")},
                        {"device", a.str("device")},
                        {"threads", threads},
                        {"seconds", secs},
                        {"queries_per_s", num("test") / secs}};
  std::cout << out.dump() << "\n";
  return r.completed ? 0 : 1;
}
