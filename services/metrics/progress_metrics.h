// The progress metrics of a batch service (scdino-features, scdino-eval):
// units done and units in total; the throughput is rate() of the counter.
// Names follow scdino_<service>_<unit>_... (docs/metrics.md).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <string>

namespace scdino::metrics {

/// Thread-safe (prometheus-cpp metrics are atomic).
class ProgressMetrics {
 public:
  /// `unit` is plural: "images", "queries".
  ProgressMetrics(prometheus::Registry& registry, const std::string& service, const std::string& unit);
  /// `done` only grows within a process; a resumed run starts at what it skips.
  void Set(int64_t done, int64_t total);

 private:
  prometheus::Counter* done_;
  prometheus::Gauge* total_;
  double reported_ = 0.0;
};

/// The stages of any service (common/progress.h's StageProgress), one
/// series per stage: scdino_<service>_stage_progress_ratio{stage} (done over
/// total, whatever the stage counts; 0 while its total is unknown),
/// _stage_eta_seconds{stage} and _stage_running{stage} (1 from its first
/// report to its end, then 0). The counts with their units are in the
/// control API's status. Thread-safe.
class StageMetrics {
 public:
  StageMetrics(prometheus::Registry& registry, const std::string& service);
  void Set(const std::string& stage, int64_t done, int64_t total, double eta_seconds, bool finished);

 private:
  prometheus::Family<prometheus::Gauge> *progress_, *eta_, *running_;
};

}  // namespace scdino::metrics
