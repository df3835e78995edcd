// The training loop's view of its control status (run/run_control.h):
// every change of state and progress the loop publishes goes through here,
// so the loop itself says what happened and this says what callers see.
// A null RunControl (ranks other than 0, tests) makes every call a no-op.
// Not thread-safe: the training loop owns it.
#pragma once

#include <cstdint>

#include "run/run_control.h"
#include "common/status.h"
#include "training/reports.h"

namespace scdino::training {

class StatusReporter {
 public:
  explicit StatusReporter(RunControl* control) : control_(control) {}

  /// RUNNING at `iteration` of `epochs` x `niter`, `images_per_iteration`
  /// over all ranks.
  void Start(int64_t iteration, int64_t niter, int64_t epochs, int64_t images_per_iteration);
  /// Progress, speed (smoothed over recent steps), ETA and the step's values.
  void Step(const StepReport& r, int64_t nonfinite_steps);
  /// The health and collapse verdict of the last logging interval.
  void Health(const HealthReport& h);
  /// The last learning check (trainer/learning_check.h).
  void Learning(const LearningReport& r);
  /// A rollback after a collapse.
  void Recovery(const RecoveryReport& r);
  void State(RunState s);
  void Checkpoint(const CheckpointReport& r);
  /// The final state: COMPLETED, STOPPED, or FAILED with the reason; callers
  /// still waiting for a checkpoint get the error.
  void End(bool completed, const Status& error);

 private:
  void Update(const std::function<void(RunStatus&)>& change);
  RunControl* control_;
  int64_t niter_ = 1, epochs_ = 1, images_per_iteration_ = 0;
  double rate_ = 0.0;  // iterations/s, smoothed
};

}  // namespace scdino::training
