// Feature-extraction benchmark: images/s of scdino-features' whole path
// (TIFF decode, channel selection, min-max, resize, normalisation, batched
// ViT forward, L2 normalisation, shard and output files) on a generated data
// set of synthetic cells, with a randomly initialised backbone. Prints one
// JSON line. The cells are --image-size px (0: the model's --size, so that
// no resize happens, scDINO's feature step at 224 px; 50: the seeds' cells,
// resized to --size as scdino-features does). --precision bf16 runs the
// forward under autocast (what scdino-features does on a GPU).
//
//   scdino-bench-features [--arch vit_small] [--patch 16] [--channels 5]
//     [--size 224] [--image-size 0] [--images 64] [--batch 32] [--loaders 2]
//     [--threads 0] [--device cpu|cuda] [--precision fp32|bf16|fp16]
//     [--dir /tmp/scdino-bench-features]
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_flags.h"
#include "data/dataset.h"
#include "data/image_io.h"
#include "data/split.h"
#include "data/synthetic.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "launch/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-features", "Images/s of feature extraction from TIFF files (docs/performance.md).",
                               {{"arch", "vit_small", "ViT preset (vit_tiny, vit_small, vit_base)"},
                                {"patch", "16", "patch size, px"},
                                {"channels", "5", "image channels"},
                                {"size", "224", "the model's input size, px (scDINO resizes to it)"},
                                {"images", "64", "synthetic images to extract"},
                                {"batch", "32", "images a forward pass"},
                                {"loaders", "2", "loader threads"},
                                {"threads", "0", "intra-op threads (0: all cores)"},
                                {"device", "cpu", "cpu or cuda"},
                                {"dir", "/tmp/scdino-bench-features", "scratch directory for the images and features (removed first)"},
                                {"image-size", "0", "size of the TIFF files, px (0: the input size, no resize)"},
                                {"precision", "fp32", "fp32, bf16 or fp16"}});
  auto num = [&](const char* k) { return a.num(k); };
  const int threads = scdino::run::ConfigureCpu(num("threads"));
  torch::Device device = a.str("device") == "cuda" ? torch::kCUDA : torch::kCPU;
  const std::string dir = a.str("dir");
  std::filesystem::remove_all(dir);

  // The data set: synthetic cells at the model's input size, as TIFF files,
  // so that no resize happens (scDINO's feature step at 224 px).
  scdino::data::SyntheticOptions so;
  so.classes = 4;
  so.per_class = (num("images") + 3) / 4;
  so.channels = num("channels");
  so.size = num("image-size") > 0 ? num("image-size") : num("size");
  auto set = scdino::data::MakeSyntheticSet(so);
  for (int64_t i = 0; i < set.images.size(0); ++i) {
    const std::string cls = dir + "/data/" + set.class_names[set.labels[i].item<int64_t>()];
    std::filesystem::create_directories(cls);
    auto hwc = (set.images[i].permute({1, 2, 0}) * 255).round().to(torch::kUInt8).contiguous();
    if (auto s = scdino::data::WriteTiff(cls + "/cell_" + std::to_string(i) + ".tif", hwc); !s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
  }
  auto dataset = scdino::data::IndexFolder(dir + "/data");
  if (!dataset.ok()) {
    std::cerr << dataset.status().ToString() << "\n";
    return 1;
  }
  scdino::features::ExtractJob job;
  job.dataset = *dataset;
  job.splits = *scdino::data::AssignSplits(job.dataset, {0.8, 0, "", ""});
  job.prep.resize = num("size");
  job.prep.mean.assign(num("channels"), 0.3);
  job.prep.std.assign(num("channels"), 0.2);
  auto vit = scdino::model::VitOptions::Preset(a.str("arch"));
  vit.in_chans(num("channels")).patch_size(num("patch")).img_size(num("size"));
  job.backbone = scdino::features::RandomBackbone(vit, 0, device);

  scdino::features::ExtractOptions eo;
  eo.out_dir = dir + "/features";
  eo.batch_size = num("batch");
  eo.threads = static_cast<int>(num("loaders"));
  eo.shard_size = 4096;
  eo.device = device;
  eo.precision = scdino::model::ParsePrecision(a.str("precision")).value();
  auto r = scdino::features::ExtractFeatures(job, eo);
  if (!r.ok()) {
    std::cerr << r.status().ToString() << "\n";
    return 1;
  }
  nlohmann::json out = {{"benchmark", "features"},
                        {"arch", a.str("arch")},
                        {"patch", num("patch")},
                        {"channels", num("channels")},
                        {"size", num("size")},
                        {"image_size", so.size},
                        {"precision", a.str("precision")},
                        {"images", r->images_written},
                        {"batch", num("batch")},
                        {"device", a.str("device")},
                        {"threads", threads},
                        {"seconds", r->seconds},
                        {"images_per_s", r->images_written / r->seconds}};
  std::cout << out.dump() << "\n";
  std::filesystem::remove_all(dir);
  return 0;
}
