#include "programs/eval_wiring.h"

#ifdef SCDINO_WITH_SERVICES
#include "metrics/eval_metrics.h"
#endif

namespace scdino::process {

void AttachEvaluator(ServicePlane& plane, jobs::EvaluatorOptions* options) {
  options->control = &plane.control();
  ServicePlane* p = &plane;
  options->on_progress = [p](int64_t done, int64_t total) { p->ReportProgress(done, total); };
#ifdef SCDINO_WITH_SERVICES
  if (auto* registry = plane.registry()) {
    // Lives as long as the process: the registry holds its families.
    auto* m = new metrics::EvalMetrics(*registry);
    options->on_evaluated = [m](const eval::CheckpointRow& row) {
      for (const auto& s : row.result.scores) m->ReportKnn(row.name, row.epoch, s.k, s.top1, s.report.balanced_accuracy);
      if (row.result.linear.done) {
        m->ReportLinearProbe(row.name, row.epoch, row.result.linear.top1, row.result.linear.report.balanced_accuracy);
      }
      if (row.result.clustering.done) {
        m->ReportClustering(row.name, row.epoch, row.result.clustering.ari, row.result.clustering.nmi);
      }
      m->CheckpointEvaluated();
    };
  }
#endif
}

}  // namespace scdino::process
