// Training checkpoints: one safetensors file holding student, teacher, DINO
// center and optimiser state under reference names, with JSON metadata
// (iteration, epoch, model shape, run shape, the config text). Written
// atomically, so an interrupted or failed write leaves the previous
// checkpoint intact. A resume checks that the run still has the shape the
// checkpoint was trained with.
// Functions of their arguments; one thread writes a given checkpoint path at a time.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/dino.h"

namespace scdino::training {

/// What a resumed run must agree on with the checkpoint.
struct RunShape {
  int64_t world_size = 1;
  int64_t batch_size_per_gpu = 1;
  int64_t epochs = 1;
  int64_t niter_per_epoch = 1;
  int64_t dataset_size = 0;  ///< images the epochs are drawn from; 0: unknown (older checkpoints)
  std::vector<int64_t> channels;
  /// Each epoch's order (MultiCropSource::epoch_order); "": unknown (older checkpoints).
  std::string epoch_order;
  int64_t global_batch() const { return world_size * batch_size_per_gpu; }
  std::string ToJson() const;
  static StatusOr<RunShape> FromJson(const std::string& json, const std::string& origin);
};

struct CheckpointInfo {
  int64_t iteration = 0;    ///< iterations completed (the next one to run)
  int64_t epoch = 0;        ///< epoch of the next iteration
  int64_t world_size = 1;
  /// Samples of the current epoch's order trained on (a resume on another
  /// global batch goes on from there); -1: not recorded (older versions),
  /// then (iteration mod niter_per_epoch) x global batch.
  int64_t epoch_position = -1;
  std::string model_json;   ///< model shape, compared on resume
  RunShape run;             ///< run shape, compared on resume
  bool has_run_shape = false;  ///< false in checkpoints of older versions
  std::string config_text;  ///< the YAML the run was started with
  std::vector<std::string> classes;  ///< class names of the data set, index = label
  /// scdino.on_collapse: recover: the rollbacks so far and the settings
  /// they changed, as JSON {"count": N, "settings": [{"key", "value"}...]};
  /// "" when none.
  std::string recoveries_json;
};

Status SaveCheckpoint(const std::string& path, const model::Dino& dino, const CheckpointInfo& info);

/// Loads into `dino`; refuses a checkpoint whose model shape differs, naming
/// both shapes.
StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& path, model::Dino& dino);

/// Whether a run of shape `now` may resume from `saved` at `iteration`:
/// FailedPrecondition naming every difference that would make the resumed
/// run wrong (channels, another data set, fewer epochs, another global
/// batch unless `elastic_resume` is batch_per_gpu), or the notes to log
/// for changes that are safe (more epochs, another world size, another
/// global batch), saying what they do.
StatusOr<std::vector<std::string>> CheckResume(const RunShape& saved, const RunShape& now, int64_t iteration,
                                               const std::string& origin,
                                               const std::string& elastic_resume = "global_batch");

/// The per-rank batch a run on `world_size` ranks resumes `checkpoint` with
/// under scdino.elastic_resume `mode`: `configured` (no checkpoint, one
/// without a run shape, the same world size, or batch_per_gpu), or for
/// global_batch the checkpoint's global batch / world_size, with a note
/// saying so in `note`. InvalidArgument names both numbers and the ranks
/// that would divide it when world_size does not.
StatusOr<int64_t> ResumeBatchPerGpu(const std::string& checkpoint, int64_t world_size, int64_t configured,
                                    const std::string& mode, std::string* note);

}  // namespace scdino::training
