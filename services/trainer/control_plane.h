// The trainer's control plane: rank 0's gRPC control server, its token and
// endpoint file, and every rank's Prometheus exporter with the trainer's
// metrics and its file_sd file. Wired into TrainerOptions by Start; Finish
// tears it down. A build without the service layer (SCDINO_WITH_SERVICES=OFF)
// trains without it.
#pragma once

#include <memory>

#include "common/run_control.h"
#include "common/status.h"
#include "training/config.h"
#include "training/launch.h"
#include "training/trainer.h"

namespace scdino::trainer {

class ControlPlane {
 public:
  /// Starts what the config enables and sets options->control, on_step and
  /// on_checkpoint.
  static StatusOr<std::unique_ptr<ControlPlane>> Start(const training::TrainConfig& config,
                                                       const training::LaunchInfo& launch, torch::Device device,
                                                       training::TrainerOptions* options);
  ~ControlPlane();
  RunControl& control() { return control_; }
  /// Lets open watchers see the final state, then stops serving; removes the
  /// endpoint file (a crash leaves it, naming a dead pid).
  void Finish();

 private:
  ControlPlane() = default;
  struct Parts;
  RunControl control_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace scdino::trainer
