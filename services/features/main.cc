// scdino-features: the CLS features of every image of a run's data set for
// one or more checkpoints (docs/features.md). Wiring only: flags, config,
// data set, statistics, split, backbone, ExtractFeatures, exit code.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/checkpoint_files.h"
#include "data/split.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "runtime/command_line.h"
#include "runtime/service_plane.h"
#include "training/config.h"
#include "training/trainer.h"

namespace {

using namespace scdino::runtime;  // the exit codes, CommandLine
namespace fs = std::filesystem;

const char kUsage[] =
    "usage: scdino-features --config FILE [--checkpoint PATH ...] [--all-checkpoints] [--random-init]\n"
    "                       [--checkpoint-key teacher|student] [--raw] [--threads N]\n"
    "  --config FILE          the run's YAML config (data set, channels, downstream_analyses)\n"
    "  --checkpoint PATH      a checkpoint or converted weights file (repeatable);\n"
    "                         default: <run_dir>/checkpoint.safetensors\n"
    "  --all-checkpoints      every checkpoint of the run directory (checkpoint*.safetensors), oldest first\n"
    "  --random-init          also a randomly initialised backbone (seed meta.seed): the baseline\n"
    "  --checkpoint-key KEY   teacher (default, as scDINO) or student\n"
    "  --raw                  also write features_raw.npy (before L2 normalisation)\n"
    "  --threads N            intra-op CPU threads (0 = all cores)\n"
    "output: <run_dir>/features/<checkpoint name>/ (features.npy, index.csv, metadata.json, features.h5ad)\n"
    "exit codes: 0 done, 1 failed, 2 bad input, 4 stopped through the control API,\n"
    "            75 stopped by a signal (complete shards are kept; run again to resume)\n";

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-features", "finishing the current batch (complete shards are kept)");
  std::string key_override;
  std::vector<std::string> checkpoints;
  bool all = false, random_init = false, raw = false;
  CommandLine cl("scdino-features", kUsage);
  cl.Value("--checkpoint",
           [&](const std::string& v) {
             checkpoints.push_back(v);
             return std::string();
           })
      .Switch("--all-checkpoints", [&] { all = true; })
      .Switch("--random-init", [&] { random_init = true; })
      .Value("--checkpoint-key",
             [&](const std::string& v) {
               key_override = v;
               return v == "teacher" || v == "student" ? std::string() : std::string("teacher or student");
             })
      .Switch("--raw", [&] { raw = true; });
  if (auto code = cl.Parse(argc, argv, std::cout, std::cerr)) return *code;
  const auto& config = cl.config();
  const std::string& config_path = cl.config_path();
  const auto& down = config.downstream;
  const std::string key = key_override.empty() ? down.checkpoint_key : key_override;
  if (all) {
    for (const auto& e : scdino::ListCheckpointFiles(config.run_dir())) checkpoints.push_back(e.path);
  }
  if (checkpoints.empty() && !random_init) checkpoints.push_back(config.run_dir() + "/checkpoint.safetensors");
  for (const auto& c : checkpoints) {
    if (!fs::exists(c)) {
      std::cerr << "scdino-features: checkpoint " << c << " does not exist (train first, or pass --checkpoint PATH)\n";
      return kExitBadInput;
    }
  }
  const int n_threads = cl.ConfigureThreads();
  try {
    auto launch = scdino::training::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) {
      std::cerr << "scdino-features: " << launch.status().message() << "\n";
      return kExitBadInput;
    }
    auto picked = cl.Device(launch->local_rank);
    if (!picked.ok()) {
      std::cerr << "scdino-features: " << picked.status().message() << "\n";
      return kExitBadInput;
    }
    const torch::Device device = *picked;
    std::cerr << "scdino-features: run " << config.run_dir() << ", rank " << launch->rank << " of "
              << launch->world_size << ", device " << device << ", " << n_threads << " CPU threads\n";
    auto dataset = scdino::training::IndexDataset(config);
    if (!dataset.ok()) {
      std::cerr << "scdino-features: " << dataset.status().message() << "\n";
      return kExitBadInput;
    }
    scdino::features::FeaturePrep prep;
    prep.image = config.image_prep();
    prep.resize = down.resize ? down.resize_length : 0;
    auto stats = scdino::training::LoadOrComputeStats(config, *dataset, prep.image);
    if (!stats.ok()) {
      std::cerr << "scdino-features: " << stats.status().message() << "\n";
      return kExitBadInput;
    }
    prep.mean = stats->mean;
    prep.std = stats->std;
    scdino::data::SplitOptions so;
    so.train_fraction = config.meta.train_datasetsplit_fraction;
    so.seed = static_cast<uint64_t>(config.meta.seed);
    if (config.scdino.split.mode == "folders") {
      so.train_folder = config.scdino.split.train_folder;
      so.test_folder = config.scdino.split.test_folder;
    }
    auto splits = scdino::data::AssignSplits(*dataset, so);
    if (!splits.ok()) {
      std::cerr << "scdino-features: " << splits.status().message() << "\n";
      return kExitBadInput;
    }
    nlohmann::json channel_names = nlohmann::json::array();
    for (auto c : config.channels()) {
      auto it = config.meta.channel_dict.find(c);
      channel_names.push_back(it == config.meta.channel_dict.end() ? std::to_string(c) : it->second);
    }
    const nlohmann::json extra = {
        {"config", fs::absolute(config_path).string()},
        {"run", config.meta.name_of_run},
        {"channels", {{"indices", config.channels()}, {"names", channel_names}}},
        {"preprocessing",
         {{"center_crop", config.meta.center_crop},
          {"min_max", "per image and channel, to [0, 1]"},
          {"resize", prep.resize},
          {"interpolation", "bilinear"}}},
        {"statistics", {{"file", config.stats_path()}, {"mean", stats->mean}, {"std", stats->std}}},
        {"split",
         {{"mode", config.scdino.split.mode},
          {"train_fraction", so.train_fraction},
          {"seed", so.seed},
          {"train_folder", so.train_folder},
          {"test_folder", so.test_folder}}},
        {"world_size", launch->world_size}};

    auto plane = ServicePlane::Start(config, *launch, {"features", "images"});
    if (!plane.ok()) {
      std::cerr << "scdino-features: " << plane.status().ToString() << "\n";
      return kExitFailed;
    }
    std::vector<std::string> names;
    for (const auto& c : checkpoints) names.push_back(fs::path(c).stem().string());
    if (random_init) {
      checkpoints.push_back("");
      names.push_back("random_init");
    }
    for (size_t i = 0; i < checkpoints.size(); ++i) {
      scdino::features::Backbone backbone;
      if (checkpoints[i].empty()) {
        auto vit = config.dino_options().vit;
        backbone = scdino::features::RandomBackbone(vit, static_cast<uint64_t>(config.meta.seed), device);
      } else {
        auto b = scdino::features::LoadBackbone(checkpoints[i], key, device);
        if (!b.ok()) {
          std::cerr << "scdino-features: " << b.status().message() << "\n";
          (*plane)->Finish(scdino::RunState::kFailed, b.status().ToString());
          return kExitBadInput;
        }
        backbone = std::move(b).value();
      }
      scdino::features::ExtractJob job{*dataset, *splits, prep, backbone, extra.dump()};
      scdino::features::ExtractOptions eo;
      eo.out_dir = config.features_dir(names[i]);
      eo.batch_size = down.features_batch_size_per_gpu;
      eo.threads = static_cast<int>(std::max<int64_t>(1, down.features_num_workers));
      eo.shard_size = config.scdino.features.shard_size;
      eo.normalize = down.normalize;
      eo.write_raw = raw || config.scdino.features.write_raw;
      eo.rank = launch->rank;
      eo.world_size = launch->world_size;
      eo.wait_timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
      eo.device = device;
      eo.control = launch->rank == 0 ? &(*plane)->control() : nullptr;
      eo.stop_signal = StopSignalReceived;
      eo.on_progress = [&](int64_t done, int64_t total) { (*plane)->ReportProgress(done, total); };
      eo.log = &std::cerr;
      std::cerr << "scdino-features: " << (checkpoints[i].empty() ? "random initialisation" : checkpoints[i]) << " ("
                << backbone.key << ") -> " << eo.out_dir << "\n";
      auto r = scdino::features::ExtractFeatures(job, eo);
      if (!r.ok()) {
        std::cerr << "scdino-features: " << r.status().message() << "\n";
        (*plane)->Finish(scdino::RunState::kFailed, r.status().ToString());
        return r.status().code() == scdino::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailed;
      }
      if (!r->completed) {
        (*plane)->Finish(scdino::RunState::kStopped);
        std::cerr << "scdino-features: stopped; " << r->shards_written << " shards written here (run again to resume)\n";
        return StopSignalReceived() ? kExitPreempted : kExitStoppedByApi;
      }
      if (r->already_complete) {
        std::cerr << "scdino-features: " << eo.out_dir << " is already complete\n";
      } else {
        std::cerr << "scdino-features: rank " << launch->rank << ": " << r->images_written << " images in " << r->seconds
                  << " s (" << (r->seconds > 0 ? r->images_written / r->seconds : 0.0) << " images/s), "
                  << r->shards_written << " shards written, " << r->shards_skipped << " already complete\n";
      }
    }
    (*plane)->Finish(scdino::RunState::kCompleted);
    return kExitCompleted;
  } catch (const std::exception& e) {
    std::cerr << "scdino-features: " << e.what() << "\n";
    return kExitFailed;
  }
}
