// The features' job at the config's edge (jobs/: what a service builds from
// its run's config over the libraries, which never see it). What every
// checkpoint's extraction of a run shares, set up once from the run's
// config: the data set, its split, the preprocessing with the run's
// channel statistics and the metadata written beside the features. Used by
// scdino-features and by scdino-eval --follow, which extracts each new
// checkpoint's features itself.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "launch/coordinator.h"
#include "launch/launch.h"

namespace scdino::jobs {

using features::Backbone;
using features::ExtractOptions;
using features::FeaturePrep;

struct FeatureRun {
  data::Dataset dataset;
  std::vector<data::Split> splits;
  FeaturePrep prep;
  /// metadata.json's fields about the run (config, channels,
  /// preprocessing, statistics, split, world size): a JSON object.
  std::string metadata_json;
};

/// Of `dataset` (run::IndexDataset, indexed once by the caller): checks the
/// channels, loads or computes the statistics (rank 0 first; `should_stop`
/// ends that with Aborted) and assigns the split. `resize` >= 0: the side
/// the images are resized to (0: none) instead of the config's
/// downstream_analyses resize (the trainer's learning check measures at the
/// crop size it trains on).
StatusOr<FeatureRun> PrepareFeatureRun(const run::RunConfig& config, data::Dataset dataset,
                                       const std::string& config_path,
                                       const run::LaunchInfo& launch, run::Coordinator& coordinator,
                                       const std::function<bool()>& should_stop = {}, int64_t resize = -1);

/// What stands for the raw-pixel baseline where a checkpoint is named.
inline const std::string kRawPixels = "<raw pixels>";

/// The features directory's name of a checkpoint file (its stem),
/// "random_init" for "" and "raw_pixels" for kRawPixels.
std::string FeaturesName(const std::string& checkpoint);

/// The backbone of `checkpoint` ("": the random initialisation of
/// meta.seed; kRawPixels: the images as `prep` prepares them; the
/// baselines).
StatusOr<Backbone> BackboneFor(const run::RunConfig& config, const std::string& checkpoint, const std::string& key,
                               const FeaturePrep& prep, torch::Device device);

/// The features' batch on a GPU where the config does not set
/// downstream_analyses.compute_cls_features.batch_size_per_gpu.
constexpr int64_t kGpuFeaturesBatch = 256;

/// ExtractOptions from the config (batch, decoding threads, shard size,
/// normalisation, raw, timeouts) for this launch, writing to
/// config.features_dir(name); on a GPU, kGpuFeaturesBatch unless the config
/// sets the batch, and bf16 autocast (fp16 before compute capability 8.0).
/// The caller adds control, coordinator, stops and progress.
ExtractOptions ExtractOptionsFor(const run::RunConfig& config, const run::LaunchInfo& launch, const std::string& name,
                                 torch::Device device);

/// What the service around an extraction gives it (ExtractOptions' fields
/// of the same names): rank 0's control channel, how the ranks meet, the
/// stop signal, progress, and where to say what it does and as whom.
struct ExtractHooks {
  RunControl* control = nullptr;
  run::Coordinator* coordinator = nullptr;
  std::function<bool()> stop_signal;
  std::function<void(int64_t done, int64_t total)> on_progress;
  std::ostream* log = nullptr;
  std::string program = "scdino";
};

/// This rank's extraction of `checkpoint` (or a baseline, as BackboneFor)
/// into config.features_dir(FeaturesName(checkpoint)), with `hooks`: says
/// on hooks.log what is extracted, where to, and what this rank wrote. A
/// stop before the end is Aborted, naming what was being extracted (the
/// shards written stay for the rerun). Returns the features directory.
/// scdino-features runs it for each checkpoint asked for and followed;
/// scdino-eval --follow before evaluating each.
StatusOr<std::string> ExtractCheckpoint(const run::RunConfig& config, const FeatureRun& run,
                                        const std::string& checkpoint, const std::string& key,
                                        const run::LaunchInfo& launch, torch::Device device,
                                        const ExtractHooks& hooks);

}  // namespace scdino::jobs
