// scdino-eval's side of its service plane: the evaluation metrics (kNN
// accuracies per checkpoint and k) fed from the evaluator's results, and
// its progress and control channel. Only scdino-eval includes this, as only
// scdino-trainer includes trainer/trainer_wiring.h: the plane itself knows
// no service's results. Called once by the main thread before evaluating.
#pragma once

#include "jobs/checkpoint_evaluator.h"
#include "process/service_plane.h"

namespace scdino::process {

/// Lets the control API steer the evaluator and the metrics follow it. The
/// plane must outlive the evaluator.
void AttachEvaluator(ServicePlane& plane, jobs::EvaluatorOptions* options);

}  // namespace scdino::process
