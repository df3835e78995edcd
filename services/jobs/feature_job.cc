#include "jobs/feature_job.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <ostream>

#include "launch/environment.h"
#include "plan/source.h"

namespace scdino::jobs {

// The features library this job drives.
using features::ExtractFeatures;
using features::ExtractJob;
using features::LoadBackbone;
using features::PixelBackbone;
using features::PixelsPrepared;
using features::RandomBackbone;

namespace {

nlohmann::json ChannelNames(const run::RunConfig& config) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [index, name] : config.named_channels()) names.push_back(name);
  return names;
}

}  // namespace

StatusOr<FeatureRun> PrepareFeatureRun(const run::RunConfig& config, data::Dataset dataset,
                                       const std::string& config_path,
                                       const run::LaunchInfo& launch, run::Coordinator& coordinator,
                                       const std::function<bool()>& should_stop, int64_t resize) {
  if (config.scdino.data_source == "synthetic") {
    return Status::InvalidArgument(
        config_path + ": scdino.data_source is synthetic, whose images exist only in the trainer's memory; "
        "features are computed from image files: write the synthetic set with scdino-synth --out DIR and set "
        "scdino.data_source: folder with meta.dataset_dir: DIR");
  }
  const auto& down = config.downstream;
  FeatureRun r;
  r.dataset = std::move(dataset);
  r.prep.image = config.image_prep();
  r.prep.resize = resize >= 0 ? resize : down.resize ? down.resize_length : 0;
  if (auto s = run::CheckChannels(r.dataset, r.prep.image); !s.ok()) return s;
  auto stats = run::LoadOrComputeStats(config, r.dataset, r.prep.image, coordinator, should_stop);
  if (!stats.ok()) return stats.status();
  r.prep.mean = stats->mean;
  r.prep.std = stats->std;
  data::SplitOptions so;
  so.train_fraction = config.meta.train_datasetsplit_fraction;
  so.seed = static_cast<uint64_t>(config.meta.seed);
  if (config.scdino.split.mode == "folders") {
    so.train_folder = config.scdino.split.train_folder;
    so.test_folder = config.scdino.split.test_folder;
  }
  auto splits = data::AssignSplits(r.dataset, so);
  if (!splits.ok()) return splits.status();
  r.splits = std::move(splits).value();
  const nlohmann::json extra = {
      {"config", std::filesystem::absolute(config_path).string()},
      {"run", config.run_name()},
      {"channels", {{"indices", config.channels()}, {"names", ChannelNames(config)}}},
      {"preprocessing",
       {{"center_crop", config.meta.center_crop},
        {"min_max", "per image and channel, to [0, 1]"},
        {"resize", r.prep.resize},
        {"interpolation", "bilinear"}}},
      {"statistics", {{"file", config.stats_path()}, {"mean", stats->mean}, {"std", stats->std}}},
      {"split",
       {{"mode", config.scdino.split.mode},
        {"train_fraction", so.train_fraction},
        {"seed", so.seed},
        {"train_folder", so.train_folder},
        {"test_folder", so.test_folder}}},
      {"world_size", launch.world_size}};
  r.metadata_json = extra.dump();
  return r;
}

std::string FeaturesName(const std::string& checkpoint) {
  if (checkpoint == kRawPixels) return "raw_pixels";
  return checkpoint.empty() ? "random_init" : std::filesystem::path(checkpoint).stem().string();
}

StatusOr<Backbone> BackboneFor(const run::RunConfig& config, const std::string& checkpoint, const std::string& key,
                               const FeaturePrep& prep, torch::Device device) {
  if (checkpoint == kRawPixels) {
    return PixelBackbone(static_cast<int64_t>(prep.image.channels.size()), prep.resize);
  }
  if (checkpoint.empty()) {
    return RandomBackbone(config.dino_options().vit, static_cast<uint64_t>(config.meta.seed), device);
  }
  auto backbone = LoadBackbone(checkpoint, key, device);
  if (!backbone.ok()) return backbone;
  if (auto s = config.CheckChannelCount(backbone->vit->options().in_chans(), checkpoint + " (its " + key + ")");
      !s.ok()) {
    return s;
  }
  return backbone;
}

ExtractOptions ExtractOptionsFor(const run::RunConfig& config, const run::LaunchInfo& launch, const std::string& name,
                                 torch::Device device) {
  const auto& down = config.downstream;
  ExtractOptions eo;
  eo.out_dir = config.features_dir(name);
  eo.batch_size = down.features_batch_size_per_gpu;
  // A GPU's own batch (scDINO's 24 leaves it idle between launches) and
  // half-precision arithmetic, unless the config says otherwise.
  if (device.is_cuda()) {
    if (!config.given_keys.count("downstream_analyses.compute_cls_features.batch_size_per_gpu")) {
      eo.batch_size = kGpuFeaturesBatch;
    }
    eo.precision = run::DeviceSupportsBf16(device) ? model::Precision::kBf16 : model::Precision::kFp16;
  }
  eo.threads = static_cast<int>(std::max<int64_t>(1, down.features_num_workers));
  eo.shard_size = config.scdino.features.shard_size;
  eo.normalize = down.normalize;
  eo.write_raw = config.scdino.features.write_raw;
  eo.on_bad_image = config.bad_image_policy();
  eo.rank = launch.rank;
  eo.world_size = launch.world_size;
  eo.wait_timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
  eo.device = device;
  return eo;
}

StatusOr<std::string> ExtractCheckpoint(const run::RunConfig& config, const FeatureRun& run,
                                        const std::string& checkpoint, const std::string& key,
                                        const run::LaunchInfo& launch, torch::Device device,
                                        const ExtractHooks& hooks) {
  auto backbone = BackboneFor(config, checkpoint, key, run.prep, device);
  if (!backbone.ok()) return backbone.status();
  ExtractJob job{run.dataset, run.splits, run.prep, std::move(backbone).value(), run.metadata_json};
  auto eo = ExtractOptionsFor(config, launch, FeaturesName(checkpoint), device);
  eo.control = hooks.control;
  eo.coordinator = hooks.coordinator;
  eo.stop_signal = hooks.stop_signal;
  eo.on_progress = hooks.on_progress;
  eo.log = hooks.log;
  std::string what;
  if (checkpoint == kRawPixels) {
    // What the baseline is, also for images of mixed sizes.
    const int64_t side = run.prep.resize;
    what = "the raw pixels (every image " +
           (side > 0 ? "at " + PixelsPrepared(static_cast<int64_t>(run.prep.image.channels.size()), side)
                     : std::string("at its own size, per-channel normalised")) +
           ")";
  } else {
    what = (checkpoint.empty() ? "random initialisation" : checkpoint) + " (" + job.backbone.key + ")";
  }
  std::ostream* log = hooks.log;
  if (log) *log << hooks.program << ": " << what << " -> " << eo.out_dir << "\n";
  auto r = ExtractFeatures(job, eo);
  if (!r.ok()) return r.status();
  if (!r->completed) {
    return Status::Aborted("stopped while extracting the features of " + what + "; " +
                           std::to_string(r->shards_written) + " shards written here (run again to resume)");
  }
  if (!log) return eo.out_dir;
  if (r->already_complete) {
    *log << hooks.program << ": " << eo.out_dir << " is already complete\n";
    return eo.out_dir;
  }
  // Rank 0's time and rate are its progress line's (ServicePlane).
  *log << hooks.program << ": rank " << launch.rank << ": " << r->images_written << " images, " << r->shards_written
       << " shards written, " << r->shards_skipped << " already complete";
  if (r->images_skipped > 0) *log << ", " << r->images_skipped << " bad image(s) skipped";
  if (launch.rank > 0) {
    *log << " (" << r->seconds << " s, " << (r->seconds > 0 ? r->images_written / r->seconds : 0.0) << " images/s)";
  }
  *log << "\n";
  return eo.out_dir;
}

}  // namespace scdino::jobs
