// What every scdino service process runs beside its work: rank 0's gRPC
// control server with its token and endpoint file, and every rank's
// Prometheus exporter with its file_sd file and the state metrics. The
// trainer, scdino-features and scdino-eval start it the same way; a build
// without the service layer (SCDINO_WITH_SERVICES=OFF) runs without it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/progress.h"
#include "run/run_control.h"
#include "common/status.h"
#include "config/config.h"
#include "launch/launch.h"

namespace prometheus {
class Registry;
}

namespace scdino::process {

struct ServiceOptions {
  /// trainer | features | eval: the endpoint file's name, the metric prefix.
  std::string service;
  /// For a batch service, the plural unit of its progress ("images",
  /// "queries"): scdino_<service>_<unit>_processed_total etc. Empty: none.
  std::string progress_unit;
  /// That progress's stage name in the status and the stage metrics
  /// ("features", "kNN").
  std::string progress_stage;
};

/// Thread-compatible: the service's main thread starts, reports and
/// finishes it; the control server's threads only touch control(). While it
/// runs, every long stage's progress (any ProgressLog of the process, on any
/// thread: indexing, statistics, the learning check's loading, each
/// evaluation step) reaches its status (Progress.stage) and its metrics
/// (scdino_<service>_stage_*), besides the log.
class ServicePlane {
 public:
  static StatusOr<std::unique_ptr<ServicePlane>> Start(const run::RunConfig& config, const run::LaunchInfo& launch,
                                                       const ServiceOptions& options);

  RunControl& control() { return control_; }
  /// The process's metrics registry; null without metrics.
  prometheus::Registry* registry();
  /// A batch service's progress: the control status, the progress metrics
  /// and (rank 0) the progress lines on stderr (common/progress.h).
  void ReportProgress(int64_t done, int64_t total);
  /// Keeps `part` (something that feeds registry(), such as the trainer's
  /// metrics) alive until the plane stops, and destroys it before the
  /// exporter and its registry.
  void Keep(std::shared_ptr<void> part);
  /// Marks the final state, lets open watchers see it, stops serving,
  /// replaces the endpoint file by the end record (control/endpoint.h; a
  /// crash leaves the endpoint file, naming a dead pid), then keeps the
  /// metrics up for scdino.metrics.linger_seconds so that Prometheus's
  /// last scrape sees the final values (not after a stop signal: the node
  /// is being taken back, and the shutdown is bounded).
  void Finish(RunState final_state, const std::string& error = "", int exit_code = -1);
  /// Finishes as FAILED if no final state was set, then stops and joins the
  /// plane's threads in order: the control server, the state watcher, what
  /// Keep() holds, the exporter (its file_sd file removed).
  ~ServicePlane();

 private:
  ServicePlane() = default;
  void ReportStage(const StageProgress& p);
  struct Parts;
  // Start's parts (with the service layer): every rank's metrics, rank 0's
  // control API and endpoint file.
  Status StartMetrics(const run::RunConfig& config, const run::LaunchInfo& launch, const ServiceOptions& options);
  Status StartControl(const run::RunConfig& config, const run::LaunchInfo& launch, const ServiceOptions& options);
  struct StageTarget;
  RunControl control_;
  std::unique_ptr<Parts> parts_;
  std::unique_ptr<ProgressLog> progress_;
  std::shared_ptr<StageTarget> stage_target_;
};

/// How a service main ends on an error: the message (prefixed with the
/// program), the final state in `plane` (may be null before it started),
/// the exit code. Aborted after a stop request (a signal, the API) ends
/// STOPPED with the stop's code (75, 4); anything else FAILED with
/// ExitCodeFor.
int Fail(ServicePlane* plane, const std::string& program, const Status& s);

/// Runs a service main's body: an exception that escapes it (a LibTorch
/// error, bad_alloc) ends the process with one line naming `program` and
/// exit code 1, never a backtrace.
int GuardMain(const std::string& program, const std::function<int()>& body);

}  // namespace scdino::process
