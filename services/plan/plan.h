// The run as it trains, settled once at its start: the config the file
// gives with the values its start derives, which are the recipe
// (scdino.recipe: auto, from the data and recipe.json) and what the
// checkpoint it resumes sets (an elastic resume's batch). Rank 0 decides
// them, since it alone reads the data, recipe.json and the checkpoint for
// them, and sends them to every rank once; each rank builds the same
// settings from its own parsed config and those values. Nothing is edited
// afterwards: the trainer turns the settings into the loop's plan once
// (trainer/resolve_plan.h), which a collapse recovery edits by typed
// settings. Each rank's placement (its device and GPU binding,
// run::PickDevice) stays beside the plan: only that rank can see it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "plan/recipe.h"

namespace scdino::run {

struct RunPlan {
  /// What every rank trains with: the file's keys, the recipe's values
  /// where the file does not set a key, then the resume's values.
  RunConfig settings;
  std::vector<RecipeValue> recipe;  ///< rank 0's recipe; empty with scdino.recipe: manual
  std::vector<RecipeValue> resume;  ///< what the checkpoint sets (scdino.elastic_resume)
  std::vector<std::string> why;     ///< rank 0's lines for the log; none on the other ranks
};

/// A plan's settings from its values: `config`, then `recipe` where the
/// file does not set the key, then `resume` whatever the file says. Pure.
StatusOr<RunConfig> PlanSettings(const RunConfig& config, const std::vector<RecipeValue>& recipe,
                                 const std::vector<RecipeValue>& resume);

/// Rank 0's plan. The data's first readable image is read once
/// (data::ProbeFirstImage) and checked against the combination the run
/// trains (CheckCombinations). The data is measured with `resume` applied
/// (its batch makes the global batch) and checked against the batch and
/// crops (CheckDataFitsRun). With scdino.recipe: auto, the recipe is the one
/// recipe.json in the run directory holds (a run started before on the
/// same data); else it is derived from the data and written there (the
/// flips from MeasureFlips). A recipe.json derived for other data is
/// derived anew on a fresh start (saying so) and refused, naming both data
/// sets, when `resuming` (a checkpoint is there and --no-resume was not
/// given). `should_stop` ends the measurement of the flips.
StatusOr<RunPlan> ResolvePlan(const RunConfig& config, const data::Dataset& dataset, int64_t ranks, bool resuming,
                              const std::vector<RecipeValue>& resume, const std::function<bool()>& should_stop = {});

/// Every rank's plan: rank 0 resolves it (ResolvePlan, with its own
/// `resume`: what it read of the checkpoint) and sends its values once;
/// every rank builds its settings from `config` and them (PlanSettings),
/// or returns rank 0's error. Another rank's `resume` is not used, and it
/// reads neither the data nor recipe.json for the plan (`dataset` may be
/// empty there).
StatusOr<RunPlan> SettlePlan(const RunConfig& config, const data::Dataset& dataset, Coordinator& coordinator,
                             bool resuming, const std::vector<RecipeValue>& resume = {},
                             const std::function<bool()>& should_stop = {});

}  // namespace scdino::run
