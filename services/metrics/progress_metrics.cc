#include "metrics/progress_metrics.h"

#include <algorithm>

namespace scdino::metrics {

ProgressMetrics::ProgressMetrics(prometheus::Registry& registry, const std::string& service,
                                 const std::string& unit) {
  const std::string p = "scdino_" + service + "_" + unit;
  done_ = &prometheus::BuildCounter().Name(p + "_processed_total").Help(unit + " processed").Register(registry).Add({});
  total_ = &prometheus::BuildGauge().Name(p + "_to_process").Help(unit + " this run processes in total")
                .Register(registry).Add({});
}

void ProgressMetrics::Set(int64_t done, int64_t total) {
  const double d = static_cast<double>(done);
  if (d > reported_) {
    done_->Increment(d - reported_);
    reported_ = d;
  }
  total_->Set(static_cast<double>(total));
}

StageMetrics::StageMetrics(prometheus::Registry& registry, const std::string& service) {
  const std::string p = "scdino_" + service + "_stage_";
  progress_ = &prometheus::BuildGauge()
                   .Name(p + "progress_ratio")
                   .Help("share of a long stage done (indexing, statistics, features, each evaluation step); 0 while "
                         "its total is unknown")
                   .Register(registry);
  eta_ = &prometheus::BuildGauge().Name(p + "eta_seconds").Help("estimated seconds to the stage's end; 0: unknown or "
                                                               "ended").Register(registry);
  running_ = &prometheus::BuildGauge().Name(p + "running").Help("1 while the stage runs, 0 once it ended")
                  .Register(registry);
}

void StageMetrics::Set(const std::string& stage, int64_t done, int64_t total, double eta_seconds, bool finished) {
  progress_->Add({{"stage", stage}}).Set(total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total))
                                                   : 0.0);
  eta_->Add({{"stage", stage}}).Set(eta_seconds);
  running_->Add({{"stage", stage}}).Set(finished ? 0.0 : 1.0);
}

}  // namespace scdino::metrics
