// Training-step benchmark: images/s of full DINO steps (teacher and student
// forward, loss, backward, clipping, AdamW, EMA) for a stated model and crop
// configuration, on random crops, after warm-up steps. Prints one JSON line
// with the step's FLOPs (counted from the shapes: matrix products of the
// backbone and head, forward once for the teacher, forward and backward
// (3x) for the student), the FLOP/s achieved, and the CPU's peak: its clock
// measured with a chain of dependent additions (one per cycle) times
// --flops-per-cycle (32 on AVX2/AVX-512 cores with two 256-bit FMA pipes,
// as AMD Zen 2-4 and Intel client cores) times the threads.
//
//   scdino-bench-train-step [--arch vit_small] [--patch 16] [--channels 5]
//     [--global 224] [--local 96] [--local-crops 8] [--batch 8]
//     [--out-dim 65536] [--depth 0] [--steps 3] [--warmup 1] [--threads 0]
//     [--device cpu|cuda] [--flops-per-cycle 32] [--profile TRACE.json]
//     [--cpu-gemm 1]
// --cpu-gemm 0 sends every product to LibTorch's own ops (scdino.cpu_gemm:
// false); the JSON line names what served them (cpu_products).
// --profile writes LibTorch's per-operator trace of the timed steps (Chrome
// trace format; bench/profile_summary.py sums it per operator).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include <torch/csrc/autograd/profiler_legacy.h>

#include "bench/bench_flags.h"
#include "model/cpu_gemm.h"
#include "model/dino.h"
#include "model/vit.h"
#include "run/environment.h"

namespace {

using scdino::model::DinoOptions;

// Multiply-adds count 2 FLOPs; elementwise work (GELU, LayerNorm, softmax,
// AdamW) is left out: it is a few percent of a ViT step.
double BackboneForwardFlops(const DinoOptions& o, int64_t size) {
  const auto& v = o.vit;
  const double patches = std::pow(static_cast<double>(size / v.patch_size()), 2);
  const double n = patches + 1, d = static_cast<double>(v.embed_dim());
  const double embed = 2 * patches * static_cast<double>(v.in_chans() * v.patch_size() * v.patch_size()) * d;
  const double block = 2 * n * d * 3 * d        // qkv
                       + 2 * 2 * n * n * d      // scores and their product with v
                       + 2 * n * d * d          // projection
                       + 2 * 2 * n * d * v.mlp_ratio() * d;  // MLP
  return embed + static_cast<double>(v.depth()) * block;
}

double HeadForwardFlops(const DinoOptions& o) {
  const double d = static_cast<double>(o.vit.embed_dim()), h = static_cast<double>(o.head_hidden_dim),
               b = static_cast<double>(o.head_bottleneck_dim), k = static_cast<double>(o.out_dim);
  return 2 * (d * h + static_cast<double>(o.head_nlayers - 2) * h * h + h * b + b * k);
}

double StepFlopsPerImage(const DinoOptions& o, int64_t global, int64_t local) {
  const double g = BackboneForwardFlops(o, global) + HeadForwardFlops(o);
  const double l = BackboneForwardFlops(o, local) + HeadForwardFlops(o);
  const double teacher = 2 * g;
  const double student = 2 * g + static_cast<double>(o.local_crops_number) * l;
  return teacher + 3 * student;
}

// Cycles per second of one core: a chain of dependent additions retires one
// per cycle.
double MeasureClockHz() {
  const int64_t n = 400'000'000;
  uint64_t x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    asm volatile("add $1, %0" : "+r"(x));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) / s;
}

// What one large fp32 matrix product reaches on these threads: the
// attainable peak of the BLAS.
double MeasureGemmFlops() {
  auto a = torch::randn({2048, 2048}), b = torch::randn({2048, 2048});
  torch::mm(a, b);
  const int reps = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) torch::mm(a, b);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return reps * 2.0 * 2048 * 2048 * 2048 / s;
}

}  // namespace

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-train-step", "Images/s of full DINO training steps on random crops (docs/performance.md).",
                               {{"arch", "vit_small"}, {"patch", "16"}, {"channels", "5"}, {"global", "224"},
                                {"local", "96"}, {"local-crops", "8"}, {"batch", "8"}, {"out-dim", "65536"},
                                {"depth", "0"}, {"steps", "3"}, {"warmup", "1"}, {"threads", "0"}, {"device", "cpu"},
                                {"flops-per-cycle", "32"}, {"profile", ""}, {"cpu-gemm", "1"}});
  auto num = [&](const char* k) { return a.num(k); };
  // --cpu-gemm 0: every product on LibTorch's own ops (scdino.cpu_gemm: false).
  const int threads = scdino::run::ConfigureCpu(num("threads"), num("cpu-gemm") != 0);
  torch::Device device = a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU;
  if (device.is_cpu()) scdino::run::KeepFreedMemoryForCpuTraining();

  scdino::model::DinoOptions o;
  o.vit = scdino::model::VitOptions::Preset(a.str("arch"));
  o.vit.in_chans(num("channels")).patch_size(num("patch")).img_size(num("global")).drop_path_rate(0.1);
  if (num("depth") > 0) o.vit.depth(num("depth"));
  o.out_dim = num("out-dim");
  o.local_crops_number = num("local-crops");
  scdino::model::Dino dino(o, device);

  const int64_t B = num("batch");
  scdino::model::StepInput in;
  for (int64_t c = 0; c < dino.ncrops(); ++c) {
    const int64_t s = c < 2 ? num("global") : num("local");
    in.crops.push_back(torch::randn({B, num("channels"), s, s}, torch::TensorOptions().device(device)));
  }
  in.epoch = 1;
  in.lr = 1e-4;
  in.weight_decay = 0.04;
  in.momentum = 0.996;
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  for (int64_t i = 0; i < num("warmup"); ++i) dino.Step(in);
  sync();
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  if (!a.str("profile").empty()) profile = std::make_unique<torch::autograd::profiler::RecordProfile>(a.str("profile"));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < num("steps"); ++i) dino.Step(in);
  sync();
  profile.reset();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = StepFlopsPerImage(o, num("global"), num("local"));
  const double achieved = flops * static_cast<double>(B * num("steps")) / secs;
  nlohmann::json r = {{"benchmark", "train_step"},
                      {"arch", a.str("arch")},
                      {"depth", o.vit.depth()},
                      {"patch", num("patch")},
                      {"channels", num("channels")},
                      {"global_crops", 2},
                      {"global_size", num("global")},
                      {"local_crops", num("local-crops")},
                      {"local_size", num("local")},
                      {"batch", B},
                      {"out_dim", o.out_dim},
                      {"device", a.str("device")},
                      {"threads", threads},
                      {"cpu_products", scdino::model::CpuGemmDescription()},
                      {"steps", num("steps")},
                      {"step_s", secs / static_cast<double>(num("steps"))},
                      {"images_per_s", static_cast<double>(B * num("steps")) / secs},
                      {"gflop_per_image", flops / 1e9},
                      {"achieved_gflops", achieved / 1e9}};
  if (!device.is_cuda()) {
    const double hz = MeasureClockHz();
    const double peak = hz * static_cast<double>(num("flops-per-cycle")) * threads;
    const double gemm = MeasureGemmFlops();
    r["clock_ghz"] = hz / 1e9;
    r["peak_gflops"] = peak / 1e9;
    r["gemm_gflops"] = gemm / 1e9;
    r["fraction_of_peak"] = achieved / peak;
    r["fraction_of_gemm"] = achieved / gemm;
  }
  std::cout << r.dump() << std::endl;
  return 0;
}
