// Training-step benchmark: images/s of full DINO steps (teacher and student
// forward, loss, backward, clipping, AdamW, EMA) for a stated model and crop
// configuration, after warm-up steps, and what a step asks of a GPU. Prints
// one JSON line with the step's FLOPs (counted from the shapes: matrix
// products of the backbone and head, forward once for the teacher, forward
// and backward (3x) for the student), the FLOP/s achieved, and the peak: on
// the CPU its clock measured with a chain of dependent additions (one per
// cycle) times --flops-per-cycle (32 on AVX2/AVX-512 cores with two 256-bit
// FMA pipes, as AMD Zen 2-4 and Intel client cores) times the threads; on a
// GPU --peak-tflops (its dense bf16 peak; 989 for an H100 or H200 SXM).
//
//   scdino-bench-train-step [--arch vit_small] [--patch 16] [--channels 5]
//     [--global 224] [--local 96] [--local-crops 8] [--batch 8]
//     [--out-dim 65536] [--depth 0] [--steps 3] [--warmup 1] [--threads 0]
//     [--device cpu|cuda] [--precision fp32|bf16|fp16] [--flops-per-cycle 32]
//     [--peak-tflops 989] [--profile TRACE.json] [--cpu-gemm 1]
//     [--fused-attention 1] [--count-steps 1] [--ops-detail 0]
//     [--trainer 0] [--image-size 50] [--ranks 1] [--data DIR] [--loaders 2]
// Two steps are measured:
// - --trainer 0: Dino::Step alone, on random crops made once;
// - --trainer 1: the trainer's own step (training::Trainer): the file loader
//   over TIFF cells of --image-size px (written into a scratch directory,
//   or read from --data; --loaders reading threads), the crops, the DINO
//   step, the lagged read of its values; --ranks N runs N ranks as threads
//   over Gloo, so the step's exchange and the gradient all-reduce are in it.
// On a GPU the trainer's data wait is the device's own (CUDA events from the
// previous step's end to the crops being ready: training/device_mark.h).
// --count-steps N counts N more steps (common/op_count.h): every operator
// call the dispatcher records (aten_ops_per_step, the same scopes as
// torch.profiler) and the host synchronisations (host_syncs_per_step);
// --ops-detail 1 lists the calls by name. --cpu-gemm 0 turns scdino's CPU
// kernels off (products, the one-pass AdamW and EMA, the fused crops:
// scdino.cpu_gemm: false) so the count is that of the path a GPU runs;
// --fused-attention 1 (the default) keeps the attention core one fused call
// there as SDPA is on a GPU, instead of LibTorch 1.13's CPU bmm, which
// records about nine calls per matrix of a batch (cpu_gemm.h).
// --profile writes LibTorch's per-operator trace of the timed steps (Chrome
// trace format; bench/profile_summary.py sums it per operator).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/torch_compat.h"
#if SCDINO_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/autograd/profiler_kineto.h>
#else
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "bench/bench_flags.h"
#include "common/files.h"
#include "common/torch_compat.h"
#include "data/image_io.h"
#include "data/synthetic.h"
#include "model/cpu_gemm.h"
#include "model/dino.h"
#include "common/op_count.h"
#include "model/vit.h"
#include "launch/environment.h"
#include "plan/source.h"
#include "training/device_memory.h"
#include "trainer/resolve_plan.h"
#include "training/trainer.h"

namespace {

using scdino::model::DinoOptions;

// --profile: LibTorch's per-operator trace of the timed steps, for Chrome's
// trace viewer. LibTorch 2.x records it with Kineto (its legacy profiler's
// RecordProfile is on the way out); 1.13 with the legacy one.
class TraceFile {
 public:
  TraceFile(std::string path, torch::Device device) : path_(std::move(path)) {
    if (path_.empty()) return;
#if SCDINO_TORCH_AT_LEAST(2, 0)
    namespace impl = torch::profiler::impl;
    std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
    if (device.is_cuda()) activities.insert(impl::ActivityType::CUDA);
    // Kineto starts a trace only after it was prepared (torch.profiler
    // does both; enableProfiler alone would start an unprepared one).
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
#else
    (void)device;
    legacy_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
#endif
  }
  void Write() {
    if (path_.empty()) return;
#if SCDINO_TORCH_AT_LEAST(2, 0)
    torch::autograd::profiler::disableProfiler()->save(path_);
#else
    legacy_.reset();
#endif
    path_.clear();
  }

 private:
  std::string path_;
#if !SCDINO_TORCH_AT_LEAST(2, 0)
  std::unique_ptr<torch::autograd::profiler::RecordProfile> legacy_;
#endif
};

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

// The counts of `n` steps, per step, into the JSON line.
void PutCounts(nlohmann::json& r, const scdino::OpCounter::Counts& c, int64_t n, bool training_thread_only,
               bool detail) {
  const double steps = static_cast<double>(n);
  const int64_t ops = training_thread_only ? c.ops - c.other_thread_ops : c.ops;
  const int64_t syncs = training_thread_only ? c.host_syncs - c.other_thread_syncs : c.host_syncs;
  r["count_steps"] = n;
  r["aten_ops_per_step"] = static_cast<double>(ops) / steps;
  r["host_syncs_per_step"] = static_cast<double>(syncs) / steps;
  r["training_thread_ops_per_step"] = static_cast<double>(c.ops - c.other_thread_ops) / steps;
  r["other_thread_ops_per_step"] = static_cast<double>(c.other_thread_ops) / steps;
  r["other_thread_syncs_per_step"] = static_cast<double>(c.other_thread_syncs) / steps;
  r["aten_ops_per_step_without_cpu_bmm_loop"] = static_cast<double>(ops - c.inside_cpu_bmm) / steps;
  r["host_syncs_by_name"] = c.syncs_by_name;
  if (detail) r["ops_by_name"] = c.by_name;
}

// A scratch directory of synthetic TIFF cells in class folders, removed at exit.
struct ScratchCells {
  std::string root;
  ScratchCells(int64_t images, int64_t channels, int64_t size) {
    char tmpl[] = "/tmp/scdino-bench-XXXXXX";
    root = ::mkdtemp(tmpl);
    scdino::data::SyntheticOptions o;
    o.classes = 4;
    o.per_class = (images + o.classes - 1) / o.classes;
    o.channels = channels;
    o.size = size;
    for (int64_t k = 0; k < o.classes; ++k) {
      const std::string dir = root + "/data/class_" + std::to_string(k);
      scdino::ThrowIfError(scdino::MakeDirs(dir));
      for (int64_t i = 0; i < o.per_class; ++i) {
        auto hwc = (scdino::data::SyntheticCell(o, k, i).permute({1, 2, 0}) * 255.0).round().to(torch::kUInt8);
        scdino::ThrowIfError(scdino::data::WriteTiff(dir + "/cell_" + std::to_string(i) + ".tif", hwc));
      }
    }
  }
  ~ScratchCells() { std::filesystem::remove_all(root); }
};

// The trainer's own step: Trainer over the file loader, `ranks` ranks as
// threads; rank 0's training thread counts.
int TrainerStep(const scdino::bench::Flags& a, int threads) {
  auto num = [&](const char* k) { return a.num(k); };
  const int64_t B = num("batch"), ranks = num("ranks");
  const int64_t warmup = std::max<int64_t>(1, num("warmup")), steps = num("steps"), counted = num("count-steps");
  // A step's values are read once the next is queued: the counted window
  // runs from the report of step warmup + steps to that of step
  // warmup + steps + counted, one more step is queued after it. The epoch
  // is longer than the run, so the loader's prefetch stays full and no
  // epoch end (with its checkpoint) falls inside.
  const int64_t run_steps = warmup + steps + counted + 1;
  const int64_t images = B * ranks * (run_steps + 8);
  std::optional<ScratchCells> cells;
  std::string data = a.str("data");
  if (data.empty()) {
    cells.emplace(images, num("channels"), num("image-size"));
    data = cells->root + "/data";
  }
  char out_tmpl[] = "/tmp/scdino-bench-run-XXXXXX";
  const std::string out_dir = ::mkdtemp(out_tmpl);
  std::string channels = "[";
  for (int64_t c = 0; c < num("channels"); ++c) channels += (c ? ", " : "") + std::to_string(c);
  channels += "]";
  const std::string yaml = "meta:\n  name_of_run: bench\n  output_dir: " + out_dir + "\n  dataset_dir: " + data +
                           "\n  seed: 1\n  selected_channel_combination_per_run: [" + channels +
                           "]\ntrain_scDINO:\n  epochs: 1\n  saveckp_freq: 1\n  batch_size_per_gpu: " +
                           std::to_string(B) + "\n  num_workers: " + std::to_string(num("loaders")) + "\n  hyperparameters:\n    arch: " + a.str("arch") +
                           "\n    patch_size: " + std::to_string(num("patch")) +
                           (num("depth") > 0 ? "\n    depth: " + std::to_string(num("depth")) : std::string()) +
                           "\n    global_crops_size: " + std::to_string(num("global")) +
                           "\n    local_crops_size: " + std::to_string(num("local")) +
                           "\n    local_crops_number: " + std::to_string(num("local-crops")) +
                           "\n    out_dim: " + std::to_string(num("out-dim")) +
                           "\n    warmup_epochs: 0\n    drop_path_rate: 0.1\nscdino:\n  device: " + a.str("device") +
                           "\n  threads: " + std::to_string(threads) + "\n  cpu_gemm: " +
                           (num("cpu-gemm") != 0 ? "true" : "false") +
                           "\n  log_every: 100000\n  learning_check: off\n";
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::optional<scdino::OpCounter> counter;
  scdino::OpCounter::Counts counts;
  std::vector<double> step_seconds, data_wait;
  std::vector<scdino::Status> results(static_cast<size_t>(ranks), scdino::Status::Ok());
  std::vector<std::thread> workers;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    workers.emplace_back([&, rank] {
      try {
        torch::set_num_threads(threads);
        auto config = scdino::run::ParseRunConfig(yaml, "bench.yaml").value();
        scdino::training::TrainerOptions opts;
        const torch::Device device = config.scdino.device == "cuda" ? torch::kCUDA : torch::kCPU;
        opts.stop_after_iterations = run_steps;
        if (ranks > 1) {
          scdino::training::DistributedOptions dist;
          dist.timeout = std::chrono::seconds(120);
          opts.coordinator = scdino::run::Coordinator::OverStore(store, rank, ranks, dist.timeout);
          opts.collective = scdino::training::Collective::Create(store, rank, ranks, dist, device);
        } else {
          opts.coordinator = scdino::run::Coordinator::Single();
        }
        if (rank == 0) {
          opts.on_step = [&](const scdino::training::StepReport& r) {
            if (r.iteration > warmup && r.iteration <= warmup + steps) {
              step_seconds.push_back(r.step_seconds);
              data_wait.push_back(r.data_wait_seconds);
            }
            if (r.iteration == warmup + steps && counted > 0) {
              if (device.is_cuda()) torch::cuda::synchronize();
              counter.emplace();
            }
            if (r.iteration == warmup + steps + counted && counter) {
              counts = counter->Take();
              counter.reset();
            }
          };
        }
        auto dataset = scdino::run::IndexDataset(config, nullptr).value();
        auto source = scdino::run::MakeSource(config, dataset, *opts.coordinator, device).value();
        scdino::training::Trainer trainer(scdino::trainer::TrainPlanOf(config, device), std::move(source), opts);
        auto result = trainer.Run();
        results[static_cast<size_t>(rank)] = result.ok() ? scdino::Status::Ok() : result.status();
      } catch (const std::exception& e) {
        results[static_cast<size_t>(rank)] = scdino::Status::Internal(e.what());
      }
    });
  }
  for (auto& w : workers) w.join();
  std::filesystem::remove_all(out_dir);
  for (const auto& st : results) {
    if (!st.ok()) {
      std::cerr << "scdino-bench-train-step: the trainer failed: " << st.ToString() << "\n";
      return 1;
    }
  }
  double secs = 0, wait = 0;
  for (size_t i = 0; i < step_seconds.size(); ++i) secs += step_seconds[i], wait += data_wait[i];
  const double n = std::max<double>(1.0, static_cast<double>(step_seconds.size()));
  nlohmann::json r = {{"benchmark", "train_step"},
                      {"step", "trainer"},
                      {"arch", a.str("arch")},
                      {"patch", num("patch")},
                      {"channels", num("channels")},
                      {"image_size", num("image-size")},
                      {"global_size", num("global")},
                      {"local_crops", num("local-crops")},
                      {"local_size", num("local")},
                      {"batch", B},
                      {"ranks", ranks},
                      {"out_dim", num("out-dim")},
                      {"device", a.str("device")},
                      {"threads", threads},
                      {"cpu_products", scdino::model::CpuGemmDescription()},
                      {"steps", static_cast<int64_t>(step_seconds.size())},
                      {"step_s", secs / n},
                      {"data_wait_share", secs > 0 ? wait / secs : 0.0},
                      {"images_per_s", secs > 0 ? static_cast<double>(B * ranks) * n / secs : 0.0}};
  if (counted > 0) PutCounts(r, counts, counted, ranks > 1, num("ops-detail") > 0);
  // What the caching allocator holds against what the tensors ever needed:
  // streams that multiply its pools show as reserved far above the peak.
  if (auto mem = scdino::training::QueryDeviceMemory(a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU)) {
    r["peak_memory_bytes"] = mem->peak_allocated_bytes;
    r["reserved_memory_bytes"] = mem->reserved_bytes;
  }
  std::cout << r.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-train-step",
                               "Images/s and operator calls of DINO training steps (docs/performance.md).",
                               {{"arch", "vit_small", "ViT preset (vit_tiny, vit_small, vit_base)"},
                                {"patch", "16", "patch size, px"},
                                {"channels", "5", "image channels"},
                                {"global", "224", "global crop size, px"},
                                {"local", "96", "local crop size, px"},
                                {"local-crops", "8", "local crops an image"},
                                {"batch", "8", "images a step on each rank"},
                                {"out-dim", "65536", "DINO head output dimension"},
                                {"depth", "0", "transformer blocks (0: the preset's)"},
                                {"steps", "3", "timed steps"},
                                {"warmup", "1", "untimed steps first"},
                                {"threads", "0", "intra-op threads (0: all cores)"},
                                {"device", "cpu", "cpu or cuda"},
                                {"flops-per-cycle", "32", "a core's fp32 FLOPs a cycle, for the CPU's peak (32: AVX2 with two FMA units)"},
                                {"peak-tflops", "989", "the GPU's dense peak, TFLOP/s, for the fraction of it reached (989: H100 SXM bf16)"},
                                {"profile", "", "write a LibTorch profiler trace of the timed steps to this file"},
                                {"cpu-gemm", "1", "1: matrix products on oneDNN/OpenBLAS (scdino.cpu_gemm); 0: LibTorch's own"},
                                {"precision", "fp32", "fp32, bf16 or fp16"},
                                {"fused-attention", "1", "1: per-head products on the calling thread (CPU)"},
                                {"count-steps", "1", "steps whose operator calls and host syncs are counted (0: none)"},
                                {"ops-detail", "0", "1: list every operator counted"},
                                {"trainer", "0", "1: time the whole trainer (loader, step, all-reduce) instead of the model step"},
                                {"image-size", "50", "size of the synthetic images, px, with --trainer 1"},
                                {"ranks", "1", "ranks (threads over Gloo), with --trainer 1"},
                                {"data", "", "a data set for --trainer 1 (default: synthetic cells)"},
                                {"loaders", "2", "loader threads, with --trainer 1"}});
  auto num = [&](const char* k) { return a.num(k); };
  // --cpu-gemm 0: LibTorch's own ops (scdino.cpu_gemm: false).
  const int threads = scdino::run::ConfigureCpu(num("threads"), num("cpu-gemm") != 0);
  if (num("fused-attention") != 0) scdino::model::EnablePairGemm(true);
  torch::Device device = a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU;
  if (device.is_cpu()) scdino::run::KeepFreedMemoryForCpuTraining();
  if (num("trainer") != 0) return TrainerStep(a, threads);

  scdino::model::DinoOptions o;
  o.vit = scdino::model::VitOptions::Preset(a.str("arch"));
  o.vit.in_chans(num("channels")).patch_size(num("patch")).img_size(num("global")).drop_path_rate(0.1);
  if (num("depth") > 0) o.vit.depth(num("depth"));
  o.out_dim = num("out-dim");
  o.local_crops_number = num("local-crops");
  o.precision = scdino::model::ParsePrecision(a.str("precision")).value();
  o.loss_scaling = o.precision == scdino::model::Precision::kFp16;
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
  if (device.is_cuda()) scdino::training::ResetPeakDeviceMemory(device);
  for (int64_t i = 0; i < num("warmup"); ++i) dino.Step(in);
  sync();
  TraceFile profile(a.str("profile"), device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < num("steps"); ++i) dino.Step(in);
  sync();
  profile.Write();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  scdino::OpCounter::Counts counts;
  if (num("count-steps") > 0) {
    scdino::OpCounter counter;
    for (int64_t i = 0; i < num("count-steps"); ++i) dino.Step(in);
    sync();
    counts = counter.Take();
  }
  const double flops = StepFlopsPerImage(o, num("global"), num("local"));
  const double achieved = flops * static_cast<double>(B * num("steps")) / secs;
  nlohmann::json r = {{"benchmark", "train_step"},
                      {"step", "dino"},
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
                      {"precision", a.str("precision")},
                      {"threads", threads},
                      {"cpu_products", scdino::model::CpuGemmDescription()},
                      {"optimizer", dino.optimizer->implementation()},
                      {"steps", num("steps")},
                      {"step_s", secs / static_cast<double>(num("steps"))},
                      {"images_per_s", static_cast<double>(B * num("steps")) / secs},
                      {"gflop_per_image", flops / 1e9},
                      {"achieved_gflops", achieved / 1e9}};
  if (num("count-steps") > 0) PutCounts(r, counts, num("count-steps"), false, num("ops-detail") > 0);
  {
    // What SDPA takes for the global crops' attention, in the step's dtype.
    const int64_t heads = o.vit.num_heads(), d = o.vit.embed_dim() / heads;
    const int64_t tokens = (num("global") / num("patch")) * (num("global") / num("patch")) + 1;
    const auto dtype = o.precision == scdino::model::Precision::kBf16   ? torch::kBFloat16
                       : o.precision == scdino::model::Precision::kFp16 ? torch::kHalf
                                                                        : torch::kFloat32;
    const auto q = torch::zeros({2 * B, heads, tokens, d}, torch::TensorOptions(dtype).device(device));
    r["attention"] = device.is_cuda() ? scdino::compat::SdpaBackend(q, q, q, std::pow(static_cast<double>(d), -0.5))
                                      : std::string(scdino::model::HasPairGemm()
                                                        ? "scdino's CPU attention (per-head products)"
                                                        : "tensor ops (matmul, softmax)");
  }
  if (device.is_cuda()) {
    const double peak = static_cast<double>(num("peak-tflops")) * 1e12;
    r["peak_gflops"] = peak / 1e9;
    r["fraction_of_peak"] = achieved / peak;
    if (auto mem = scdino::training::QueryDeviceMemory(device)) r["peak_memory_bytes"] = mem->peak_allocated_bytes;
  } else {
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
