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

}  // namespace scdino::metrics
