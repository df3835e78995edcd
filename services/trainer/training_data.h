// The trainer's data, prepared once per process before training: the data
// set indexed once (run::IndexDataset) and handed to the recipe, the
// statistics, the multi-crop source and the learning check, each of which
// reads its images by index (a packed set with one pread each, never a
// path probed). A walk of a large folder tree costs minutes on a parallel
// file system; before this, a rank walked it twice and rank 0 three times.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "common/status.h"
#include "data/batch_source.h"
#include "run/config.h"
#include "run/coordinator.h"
#include "trainer/learning_check.h"

namespace scdino::trainer {

struct TrainingData {
  std::unique_ptr<data::MultiCropSource> source;
  /// Rank 0's, with scdino.learning_check not off and something to check
  /// against; else null and `no_check` says why (empty when it is off or
  /// this is not rank 0).
  std::unique_ptr<LearningCheck> check;
  std::string no_check;
};

/// Indexes the data of `config` once, settles the recipe on it (run::
/// SettleRecipe; `config` takes its values and rank 0 writes its lines to
/// `log` as soon as it is settled), then makes the source (the statistics
/// first; `should_stop` ends them) and, on rank 0, the learning check.
/// `resuming`: a checkpoint will be resumed (a recipe derived for other
/// data is then refused).
StatusOr<TrainingData> PrepareTrainingData(run::RunConfig* config, run::Coordinator& coordinator,
                                           torch::Device device, bool resuming, std::ostream* log,
                                           const std::function<bool()>& should_stop = {});

}  // namespace scdino::trainer
