// What the training loop is told: the options of the model, schedules and
// checkpoints it builds, and its policies, resolved once by the service
// from the run's config (trainer/train_plan.h) and never read from YAML
// again. A collapse recovery changes the plan by typed edits
// (SaferSettings, ApplySettings) whose keys are the config's key paths, so
// that a checkpoint can record them and a resume apply them again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/status.h"
#include "model/dino.h"
#include "model/schedules.h"
#include "training/checkpointer.h"

namespace scdino::training {

/// What a collapse verdict does (scdino.on_collapse).
enum class OnCollapse { kWarn, kStop, kRecover };

/// One setting changed by a collapse recovery. `key` is the config's key
/// path (train_scDINO.hyperparameters.lr), `value` the number or name as
/// the config would write it, `why` the reason said on the progress stream.
struct SettingChange {
  std::string key, value, why;
};

struct TrainPlan {
  /// Where the run is written.
  std::string run_dir;
  /// The file the settings came from: messages name it.
  std::string origin;
  /// The config's text, kept in every checkpoint.
  std::string recorded_config;
  torch::Device device = torch::kCPU;
  uint64_t seed = 0;
  int64_t batch_size_per_gpu = 1;
  int64_t epochs = 1;
  /// The data set's channels the run trains on, and where that selection
  /// is set (for the message when the data has another count).
  std::vector<int64_t> channels;
  std::string channels_key;
  /// For the device it trains on (the precision resolved).
  model::DinoOptions dino;
  /// The schedules' settings; the loop sets the iterations per epoch and
  /// the global batch.
  model::ScheduleOptions schedule;
  /// For the out-of-memory advice: the crops' sizes and the model's name.
  int64_t global_crops_size = 224, local_crops_size = 96;
  std::string arch;
  CheckpointPolicy checkpoints;
  int64_t log_every = 10;
  bool log_samples = false;
  /// A non-finite loss stops the run (else the step is skipped and counted).
  bool stop_on_nonfinite_loss = true;
  OnCollapse on_collapse = OnCollapse::kWarn;
  int64_t max_recoveries = 2;
  /// scdino.elastic_resume: global_batch or batch_per_gpu (CheckResume).
  std::string elastic_resume = "global_batch";
  /// Whether a checkpoint's recorded config trained under on_collapse:
  /// recover (its healthy checkpoint is one to roll back to); null: never.
  std::function<bool(const std::string& recorded_config)> recorded_recover;
};

/// The safer settings of a collapse recovery from `verdict`
/// (uniform_collapse, onehot_collapse): half the peak learning rate, a
/// teacher half as fast, more KoLeo, and a teacher sharpened (uniform) or
/// softened, or Sinkhorn-Knopp centering (one-hot). Each says what it was.
std::vector<SettingChange> SaferSettings(const TrainPlan& plan, const std::string& verdict);

/// `changes` applied to `plan` in order (later ones win). The keys are
/// those SaferSettings writes; another key, or a value that is not a
/// number where one is expected, is InvalidArgument naming `what` (the
/// checkpoint that recorded it), the key and the value, and leaves `plan`
/// unchanged.
Status ApplySettings(TrainPlan& plan, const std::vector<SettingChange>& changes, const std::string& what);

}  // namespace scdino::training
