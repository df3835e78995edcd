// The trainer's edge: the run's resolved config (file, recipe and resume
// settled by run::SettlePlan) turned once into the training loop's plan
// (training/train_plan.h), the only place that reads the config's
// training keys.
#pragma once

#include <torch/types.h>

#include "config/config.h"
#include "training/train_plan.h"

namespace scdino::trainer {

/// The plan of `config` for a run on `device` (`bf16_supported` decides
/// precision auto on a GPU).
training::TrainPlan TrainPlanOf(const run::RunConfig& config, torch::Device device, bool bf16_supported = true);

/// The same on the config's own device (scdino.device, index 0).
training::TrainPlan TrainPlanOf(const run::RunConfig& config);

}  // namespace scdino::trainer
