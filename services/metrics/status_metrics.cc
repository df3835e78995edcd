#include "metrics/status_metrics.h"

#include <cctype>
#include <chrono>

namespace scdino::metrics {

StatusMetrics::StatusMetrics(prometheus::Registry& registry, const std::string& service) {
  auto& family = prometheus::BuildGauge()
                     .Name("scdino_" + service + "_state")
                     .Help("1 for the process's current state (label state), 0 for the others")
                     .Register(registry);
  for (RunState s : {RunState::kStarting, RunState::kRunning, RunState::kPausing, RunState::kPaused, RunState::kCheckpointing,
                     RunState::kStopping, RunState::kCompleted, RunState::kFailed, RunState::kStopped}) {
    std::string name = RunStateName(s);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    states_.emplace_back(s, &family.Add({{"state", name}}));
  }
  eta_ = &prometheus::BuildGauge()
              .Name("scdino_" + service + "_eta_seconds")
              .Help("Estimated seconds until the work is done at the current speed; 0 when unknown")
              .Register(registry)
              .Add({});
  prometheus::BuildGauge()
      .Name("scdino_" + service + "_start_time_seconds")
      .Help("Unix time the process started: the age of a run that has not checkpointed yet")
      .Register(registry)
      .Add({})
      .Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  Set(RunStatus{});
}

void StatusMetrics::Set(const RunStatus& s) {
  for (auto& [state, gauge] : states_) gauge->Set(state == s.state ? 1.0 : 0.0);
  eta_->Set(s.eta_seconds > 0 ? s.eta_seconds : 0.0);
}

}  // namespace scdino::metrics
