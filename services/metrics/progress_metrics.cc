#include "metrics/progress_metrics.h"

namespace scdino::metrics {

ProgressMetrics::ProgressMetrics(prometheus::Registry& registry, const std::string& service,
                                 const std::string& unit) {
  const std::string p = "scdino_" + service + "_" + unit;
  done_ = &prometheus::BuildCounter().Name(p + "_processed_total").Help(unit + " processed").Register(registry).Add({});
  total_ = &prometheus::BuildGauge().Name(p + "_to_process").Help(unit + " this run processes in total")
                .Register(registry).Add({});
  rate_ = &prometheus::BuildGauge().Name(p + "_per_second").Help(unit + " per second, averaged since this process began")
               .Register(registry).Add({});
}

void ProgressMetrics::Set(int64_t done, int64_t total, double per_second) {
  const double d = static_cast<double>(done);
  if (d > reported_) {
    done_->Increment(d - reported_);
    reported_ = d;
  }
  total_->Set(static_cast<double>(total));
  rate_->Set(per_second);
}

StageMetrics::StageMetrics(prometheus::Registry& registry, const std::string& service) {
  const std::string p = "scdino_" + service + "_stage_";
  done_ = &prometheus::BuildGauge().Name(p + "done").Help("units a long stage has done (indexing, statistics, "
                                                          "features, each evaluation step)").Register(registry);
  total_ = &prometheus::BuildGauge().Name(p + "total").Help("units of the stage in total; 0: unknown")
                .Register(registry);
  eta_ = &prometheus::BuildGauge().Name(p + "eta_seconds").Help("estimated seconds to the stage's end; 0: unknown or "
                                                               "ended").Register(registry);
  running_ = &prometheus::BuildGauge().Name(p + "running").Help("1 while the stage runs, 0 once it ended")
                  .Register(registry);
}

void StageMetrics::Set(const std::string& stage, const std::string& unit, int64_t done, int64_t total,
                       double eta_seconds, bool finished) {
  done_->Add({{"stage", stage}, {"unit", unit}}).Set(static_cast<double>(done));
  total_->Add({{"stage", stage}, {"unit", unit}}).Set(static_cast<double>(total));
  eta_->Add({{"stage", stage}}).Set(eta_seconds);
  running_->Add({{"stage", stage}}).Set(finished ? 0.0 : 1.0);
}

}  // namespace scdino::metrics
