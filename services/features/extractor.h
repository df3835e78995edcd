// scdino-features' work: the CLS token of every image of a data set, in
// fixed-size shards that the ranks take round-robin (shard s goes to rank
// s mod world_size), so no image is done twice or left out whatever the
// world size, and a rerun skips the shards already complete. Rank 0 then
// assembles the shards in data-set order into the outputs of
// features/feature_set.h.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "run/run_control.h"
#include "common/status.h"
#include "data/dataset.h"
#include "data/split.h"
#include "features/backbone.h"
#include "model/precision.h"
#include "launch/coordinator.h"

namespace scdino::features {

/// scDINO's feature preprocessing, after channel selection, center crop and
/// per-image min-max (data::ImagePrep): resize to resize x resize
/// (bilinear), then per-channel normalisation.
struct FeaturePrep {
  data::ImagePrep image;
  /// Side of the square model input; 0 keeps the image size (then every
  /// image of a batch must have the same size).
  int64_t resize = 224;
  std::vector<double> mean, std;
};

/// C x H x W in [0, 1] -> C x S x S, normalised.
torch::Tensor PrepareForModel(const torch::Tensor& chw, const FeaturePrep& prep);
/// Reads (data::ReadEntry: by index from a packed set) and prepares entry
/// `i` of `d`; errors name the file.
StatusOr<torch::Tensor> LoadForModel(const data::Dataset& d, size_t i, const FeaturePrep& prep);

struct ExtractOptions {
  /// The features directory (created).
  std::string out_dir;
  int64_t batch_size = 24;
  /// Image decoding threads; the next batch is decoded while the model runs.
  int threads = 2;
  /// Images per shard (the unit of resume and of work sharing).
  int64_t shard_size = 4096;
  /// L2-normalise the rows of features.npy (scDINO's `normalize`).
  bool normalize = true;
  /// Also write features_raw.npy.
  bool write_raw = false;
  /// A bad image (unreadable, corrupt, wrong channels): kFail ends the run
  /// naming it; kSkip leaves it out of the outputs (index.csv, features.npy,
  /// .h5ad) and lists it in metadata.json's "skipped_images".
  data::BadImagePolicy on_bad_image = data::BadImagePolicy::kFail;
  int64_t rank = 0, world_size = 1;
  /// How long rank 0 waits for another rank's next shard before giving up
  /// (a rank that died; a rerun resumes).
  std::chrono::milliseconds wait_timeout{std::chrono::minutes(5)};
  torch::Device device = torch::kCPU;
  /// The forward's autocast on a GPU (bf16, fp16); fp32 on the CPU. The
  /// features are float32 whatever it is.
  model::Precision precision = model::Precision::kFp32;
  /// Rank 0's control channel (pause, resume, stop); null on other ranks.
  RunControl* control = nullptr;
  /// How the ranks meet: rank 0 publishes its control requests, the others
  /// follow them between batches. Null: one process.
  run::Coordinator* coordinator = nullptr;
  /// True once a signal asked the process to stop.
  std::function<bool()> stop_signal;
  /// Images done (all ranks, as far as this rank knows) of the total.
  std::function<void(int64_t done, int64_t total)> on_progress;
  std::ostream* log = nullptr;
};

struct ExtractJob {
  data::Dataset dataset;
  std::vector<data::Split> splits;  ///< one per data set entry
  FeaturePrep prep;
  Backbone backbone;
  /// Extra metadata.json fields (config, statistics, ...): a JSON object.
  std::string metadata_json = "{}";
};

struct ExtractResult {
  bool completed = false;       ///< every output written
  bool already_complete = false;  ///< found complete and left as it was
  int64_t shards = 0, shards_skipped = 0, shards_written = 0;
  int64_t images_written = 0;   ///< by this rank in this run
  int64_t images_skipped = 0;   ///< bad images this rank left out (on_bad_image: skip)
  double seconds = 0.0;         ///< this rank's extraction time
};

/// Runs this rank's part and, on rank 0, the assembly. A stop (control or
/// signal) returns completed = false after the current batch; the shards
/// written stay for the rerun.
StatusOr<ExtractResult> ExtractFeatures(const ExtractJob& job, const ExtractOptions& options);

/// The shards of a data set of n images: [first, first + count).
std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int64_t shard_size);

}  // namespace scdino::features
