// What the training loop reports to its observers (metrics, the control
// status, the log): one StepReport per iteration and one CheckpointReport
// per checkpoint written. Plain values, copied freely.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "model/health.h"

namespace scdino::training {

/// What one training step did (this rank's view).
struct StepReport {
  int64_t iteration = 0;  ///< iterations done after this step
  int64_t epoch = 0;
  int64_t iterations_to_process = 0;  ///< of the whole run
  int64_t epochs_to_process = 0;
  int64_t images = 0;          ///< images this rank stepped on
  int64_t skipped_images = 0;  ///< bad images dropped from this rank's batch
  bool finite = true;          ///< false: a non-finite loss, the step was skipped
  double loss = 0.0, lr = 0.0, weight_decay = 0.0, momentum = 0.0, teacher_temp = 0.0;
  double step_seconds = 0.0;       ///< whole iteration, data included
  double data_wait_seconds = 0.0;  ///< waiting for the batch (the data source's Next, once)
  double allreduce_wait_seconds = 0.0;  ///< gradient communication not hidden by backward
  model::DinoHealth health;  ///< of the global batch (the same on every rank); zeros when not finite
};

/// The DINO health over one logging interval (scdino.log_every iterations,
/// or what remained of an epoch), the same on every rank.
struct HealthReport {
  int64_t iteration = 0;  ///< iterations done at its end
  int64_t epoch = 0;
  int64_t steps = 0;      ///< finite steps averaged
  double loss = 0.0;      ///< mean loss of those steps
  model::DinoHealth health;
  /// healthy | uniform_collapse | onehot_collapse; empty during the first
  /// epoch, when a fresh network's outputs look collapsed anyway.
  std::string collapse;
};

struct CheckpointReport {
  std::string path;
  double seconds = 0.0;
  int64_t unix_ms = 0;
  int64_t iteration = 0;
};

}  // namespace scdino::training
