// Training-step benchmark: images/s of full DINO steps (teacher and student
// forward, loss, backward, clipping, AdamW, EMA) for a stated model and crop
// configuration, on random crops, after warm-up steps. Prints one JSON line.
//
//   scdino-bench-train-step [--arch vit_small] [--patch 16] [--channels 5]
//     [--global 224] [--local 96] [--local-crops 8] [--batch 8]
//     [--out-dim 65536] [--depth 0] [--steps 3] [--warmup 1] [--threads 0]
//     [--device cpu|cuda]
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_flags.h"
#include "model/dino.h"
#include "model/vit.h"
#include "run/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-train-step", "Images/s of full DINO training steps on random crops (docs/performance.md).",
                               {{"arch", "vit_small"}, {"patch", "16"}, {"channels", "5"}, {"global", "224"},
                                {"local", "96"}, {"local-crops", "8"}, {"batch", "8"}, {"out-dim", "65536"},
                                {"depth", "0"}, {"steps", "3"}, {"warmup", "1"}, {"threads", "0"}, {"device", "cpu"}});
  auto num = [&](const char* k) { return a.num(k); };
  const int threads = scdino::run::ConfigureThreads(num("threads"));
  torch::Device device = a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU;

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
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < num("steps"); ++i) dino.Step(in);
  sync();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
                      {"steps", num("steps")},
                      {"step_s", secs / static_cast<double>(num("steps"))},
                      {"images_per_s", static_cast<double>(B * num("steps")) / secs}};
  std::cout << r.dump() << std::endl;
  return 0;
}
