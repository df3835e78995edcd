// The trainer's side of its service plane: the trainer's metrics fed from
// its step and checkpoint reports, and its control channel. Only
// scdino-trainer includes this (and with it the training loop).
// Called once by the main thread before training starts.
#pragma once

#include <torch/torch.h>

#include "process/service_plane.h"
#include "training/trainer.h"

namespace scdino::process {

/// Lets the control API steer the trainer and the metrics follow it. The
/// plane must outlive the trainer.
void AttachTrainer(ServicePlane& plane, training::TrainerOptions* options, torch::Device device);

}  // namespace scdino::process
