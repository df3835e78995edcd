// The state of every service process as metrics, for dashboards and alerts
// that must tell a paused or starting run from a stalled one:
// scdino_<service>_state{state="running"} is 1 for the current state and 0
// for the other seven, scdino_<service>_eta_seconds the estimated time left
// (0 when unknown) and scdino_<service>_start_time_seconds when the process
// started. Fed from the process's RunControl status.
#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <string>
#include <vector>

#include "run/run_control.h"

namespace scdino::metrics {

/// Thread-safe (prometheus-cpp metrics are atomic).
class StatusMetrics {
 public:
  StatusMetrics(prometheus::Registry& registry, const std::string& service);
  void Set(const RunStatus& s);

 private:
  std::vector<std::pair<RunState, prometheus::Gauge*>> states_;
  prometheus::Gauge* eta_;
};

}  // namespace scdino::metrics
