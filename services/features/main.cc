// scdino-features: the CLS features of every image of a run's data set for
// one or more checkpoints (docs/features.md). Wiring only: flags, config,
// launch, data set, statistics, split, backbone, ExtractFeatures, exit code.
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
#include "run/coordinator.h"
#include "run/environment.h"
#include "run/source.h"
#include "runtime/command_line.h"
#include "runtime/exit_codes.h"
#include "runtime/service_plane.h"
#include "runtime/signals.h"

namespace {

using namespace scdino::runtime;  // the exit codes, CommandLine
namespace fs = std::filesystem;

int Fail(ServicePlane* plane, const scdino::Status& s) {
  std::cerr << "scdino-features: " << s.message() << "\n";
  if (plane) plane->Finish(scdino::RunState::kFailed, s.ToString());
  return ExitCodeFor(s);
}

nlohmann::json ChannelNames(const scdino::run::RunConfig& config) {
  nlohmann::json names = nlohmann::json::array();
  for (auto c : config.channels()) {
    auto it = config.meta.channel_dict.find(c);
    names.push_back(it == config.meta.channel_dict.end() ? std::to_string(c) : it->second);
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-features", "finishing the current batch (complete shards are kept)");
  std::string key;
  std::vector<std::string> checkpoints;
  bool all = false, random_init = false, raw = false;
  CommandLine cl("scdino-features",
                 "CLS features of every image of the run's data set (docs/features.md). Output:\n"
                 "<run_dir>/features/<checkpoint name>/ (features.npy, index.csv, metadata.json, features.h5ad).\n"
                 "Exit codes: 0 done, 1 failed, 2 bad input, 4 stopped through the control API,\n"
                 "75 stopped by a signal (complete shards are kept; run again to resume).");
  auto& app = cl.app();
  app.add_option("--checkpoint", checkpoints,
                 "a checkpoint or converted weights file (repeatable); default: <run_dir>/checkpoint.safetensors")
      ->type_name("PATH");
  app.add_flag("--all-checkpoints", all, "every checkpoint of the run directory (checkpoint*.safetensors), oldest first");
  app.add_flag("--random-init", random_init, "also a randomly initialised backbone (seed meta.seed): the baseline");
  app.add_option("--checkpoint-key", key, "teacher (as scDINO) or student; default: compute_cls_features.checkpoint_key")
      ->check(CLI::IsMember({"teacher", "student"}));
  app.add_flag("--raw", raw, "also write features_raw.npy (before L2 normalisation)");
  if (auto code = cl.Parse(argc, argv)) return *code;
  const auto& config = cl.config();
  const auto& down = config.downstream;
  if (key.empty()) key = down.checkpoint_key;
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
    auto launch = scdino::run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) return Fail(nullptr, launch.status());
    auto device = scdino::run::PickDevice(config, *launch);
    if (!device.ok()) return Fail(nullptr, device.status());
    std::cerr << "scdino-features: run " << config.run_dir() << ", rank " << launch->rank << " of "
              << launch->world_size << ", device " << *device << ", " << n_threads << " CPU threads\n";
    if (auto s = scdino::run::PrepareRunDir(config); !s.ok()) return Fail(nullptr, s);
    auto coordinator =
        scdino::run::Coordinator::Connect(*launch, std::chrono::seconds(config.scdino.distributed_timeout_s));
    if (!coordinator.ok()) return Fail(nullptr, coordinator.status());
    auto dataset = scdino::run::IndexDataset(config);
    if (!dataset.ok()) return Fail(nullptr, dataset.status());
    scdino::features::FeaturePrep prep;
    prep.image = config.image_prep();
    prep.resize = down.resize ? down.resize_length : 0;
    if (auto s = scdino::run::CheckChannels(*dataset, prep.image); !s.ok()) return Fail(nullptr, s);
    auto stats = scdino::run::LoadOrComputeStats(config, *dataset, prep.image, **coordinator);
    if (!stats.ok()) return Fail(nullptr, stats.status());
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
    if (!splits.ok()) return Fail(nullptr, splits.status());
    const nlohmann::json extra = {
        {"config", fs::absolute(cl.config_path()).string()},
        {"run", config.meta.name_of_run},
        {"channels", {{"indices", config.channels()}, {"names", ChannelNames(config)}}},
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
    if (!plane.ok()) return Fail(nullptr, plane.status());
    std::vector<std::string> names;
    for (const auto& c : checkpoints) names.push_back(fs::path(c).stem().string());
    if (random_init) {
      checkpoints.push_back("");
      names.push_back("random_init");
    }
    for (size_t i = 0; i < checkpoints.size(); ++i) {
      scdino::features::Backbone backbone;
      if (checkpoints[i].empty()) {
        backbone = scdino::features::RandomBackbone(config.dino_options().vit, static_cast<uint64_t>(config.meta.seed),
                                                    *device);
      } else {
        auto b = scdino::features::LoadBackbone(checkpoints[i], key, *device);
        if (!b.ok()) return Fail(plane->get(), b.status());
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
      eo.device = *device;
      eo.control = launch->rank == 0 ? &(*plane)->control() : nullptr;
      eo.coordinator = coordinator->get();
      eo.stop_signal = StopSignalReceived;
      eo.on_progress = [&](int64_t done, int64_t total) { (*plane)->ReportProgress(done, total); };
      eo.log = &std::cerr;
      std::cerr << "scdino-features: " << (checkpoints[i].empty() ? "random initialisation" : checkpoints[i]) << " ("
                << backbone.key << ") -> " << eo.out_dir << "\n";
      auto r = scdino::features::ExtractFeatures(job, eo);
      if (!r.ok()) return Fail(plane->get(), r.status());
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
  } catch (const c10::Error& e) {
    std::cerr << "scdino-features: " << e.what_without_backtrace() << "\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "scdino-features: " << e.what() << "\n";
    return kExitFailed;
  }
}
