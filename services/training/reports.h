// What the training loop reports to its observers (metrics, the control
// status, the log): one StepReport per iteration and one CheckpointReport
// per checkpoint written. Plain values, copied freely.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run/learning_verdict.h"
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
  /// Waiting for the batch: the data source's Next() on the CPU; on a GPU
  /// the device's gap from the previous step's end to the crops being ready.
  double data_wait_seconds = 0.0;
  /// Gradient communication not hidden by backward: the host's wait (Gloo),
  /// on a GPU the step stream's stall on NCCL's (counted a step late).
  double allreduce_wait_seconds = 0.0;
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

/// A learning check (scdino.learning_check, trainer/learning_check.h):
/// the weighted 20-NN top-1 accuracy of the teacher's CLS features on a
/// held-out split of the labelled images, against a random ViT's of the
/// same shape and the raw pixels'. Rank 0 measures it at each numbered
/// checkpoint.
struct LearningReport {
  int64_t epoch = 0;  ///< epochs done
  int64_t iteration = 0;
  int64_t k = 20;
  int64_t train_images = 0, test_images = 0, classes = 0;
  double trained_top1 = 0.0, random_top1 = 0.0, pixels_top1 = 0.0;
  double margin = 0.0;  ///< scdino.learning_margin
  double seconds = 0.0;
  LearningScores scores() const {
    return {trained_top1, random_top1, pixels_top1, margin, test_images, k};
  }
  /// learned, did not learn, or cannot tell (at the ceiling), in one line.
  LearningVerdict verdict() const { return JudgeLearning(scores()); }
};

/// A rollback after a collapse (scdino.on_collapse: recover).
struct RecoveryReport {
  int64_t recovery = 0, max_recoveries = 0;  ///< 1-based count, and the limit
  std::string verdict;                        ///< the collapse it recovers from
  int64_t from_iteration = 0, to_iteration = 0;
  std::string checkpoint;                     ///< the healthy one it went back to
  std::vector<std::string> changes;           ///< "key: value (why)"
};

}  // namespace scdino::training
