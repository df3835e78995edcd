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
#include <vector>

#include "common/status.h"
#include "data/batch_source.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "plan/plan.h"
#include "trainer/learning_check.h"

namespace scdino::trainer {

struct TrainingData {
  /// What every rank trains with (plan/plan.h): the source and the check
  /// are made from plan.settings.
  run::RunPlan plan;
  std::unique_ptr<data::MultiCropSource> source;
  /// Rank 0's, with scdino.learning_check not off and something to check
  /// against; else null and `no_check` says why (empty when it is off or
  /// this is not rank 0).
  std::unique_ptr<LearningCheck> check;
  std::string no_check;
};

/// What the checkpoint in the run directory sets for a resume on `ranks`
/// ranks: with scdino.elastic_resume: global_batch on another world size,
/// the batch per rank that keeps its global batch (its `why` says so);
/// nothing otherwise. InvalidArgument, naming the numbers, when `ranks`
/// does not divide that global batch: every rank refuses so before the
/// rendezvous.
StatusOr<std::vector<run::RecipeValue>> ElasticResume(const run::RunConfig& config, int64_t ranks);

/// Indexes the data of `config` once, settles the run's plan on it (run::
/// SettlePlan: the recipe and rank 0's `resume`, ElasticResume's values;
/// rank 0 writes its lines to `log` as soon as it is settled), then makes
/// the source (the statistics first; `should_stop` ends them) and, on rank
/// 0, the learning check and <run_dir>/crops_preview.png, all from the
/// plan's settings (a preview that cannot be made is a line in `log`,
/// never the run's end). `resuming`: a
/// checkpoint will be resumed (a recipe derived for other data is then
/// refused).
StatusOr<TrainingData> PrepareTrainingData(const run::RunConfig& config, run::Coordinator& coordinator,
                                           torch::Device device, bool resuming,
                                           const std::vector<run::RecipeValue>& resume, std::ostream* log,
                                           const std::function<bool()>& should_stop = {});

}  // namespace scdino::trainer
