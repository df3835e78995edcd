// What every scdino service process runs beside its work: rank 0's gRPC
// control server with its token and endpoint file, and every rank's
// Prometheus exporter with its file_sd file. The trainer, scdino-features
// and scdino-eval start it the same way; a build without the service layer
// (SCDINO_WITH_SERVICES=OFF) runs without it.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/run_control.h"
#include "common/status.h"
#include "training/config.h"
#include "training/launch.h"
#include "training/trainer.h"

namespace scdino::runtime {

struct ServiceOptions {
  /// trainer | features | eval: the endpoint file's name, the metric prefix.
  std::string service;
  /// For a batch service, the plural unit of its progress ("images",
  /// "queries"): scdino_<service>_<unit>_processed_total etc. Empty: none.
  std::string progress_unit;
};

/// Thread-compatible: the service's main thread starts, reports and
/// finishes it; the control server's threads only touch control().
class ServicePlane {
 public:
  static StatusOr<std::unique_ptr<ServicePlane>> Start(const training::TrainConfig& config,
                                                       const training::LaunchInfo& launch,
                                                       const ServiceOptions& options);
  ~ServicePlane();

  RunControl& control() { return control_; }
  /// Feeds the trainer's metrics from its step and checkpoint reports, and
  /// lets the control API steer it.
  void AttachTrainer(training::TrainerOptions* options, torch::Device device);
  /// A batch service's progress: the control status and the progress metrics.
  void ReportProgress(int64_t done, int64_t total);
  /// Marks the final state, lets open watchers see it, stops serving and
  /// removes the endpoint file (a crash leaves it, naming a dead pid).
  void Finish(RunState final_state, const std::string& error = "");

 private:
  ServicePlane() = default;
  struct Parts;
  RunControl control_;
  std::unique_ptr<Parts> parts_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int64_t first_done_ = -1;
};

/// Process exit codes shared by the services (docs/trainer.md).
inline constexpr int kExitCompleted = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitStopped = 3;         ///< --stop-after-iterations
inline constexpr int kExitStoppedByApi = 4;    ///< scdinoctl stop: progress saved; do not requeue
inline constexpr int kExitPreempted = 75;      ///< a signal: progress saved; requeue

}  // namespace scdino::runtime
