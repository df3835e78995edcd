#include "trainer/trainer_wiring.h"

#ifdef SCDINO_WITH_SERVICES
#include "trainer/trainer_metrics.h"
#endif

namespace scdino::process {

void AttachTrainer(ServicePlane& plane, training::TrainerOptions* options, torch::Device device) {
  options->control = &plane.control();
#ifdef SCDINO_WITH_SERVICES
  if (auto* registry = plane.registry()) {
    // The plane keeps it until it stops, before its registry goes; the
    // trainer, whose reports call it, is gone by then.
    auto owned = std::make_shared<metrics::TrainerMetrics>(*registry, device);
    auto* m = owned.get();
    plane.Keep(std::move(owned));
    options->on_step = [m](const training::StepReport& r) { m->OnStep(r); };
    options->on_checkpoint = [m](const training::CheckpointReport& r) { m->OnCheckpoint(r); };
    options->on_health = [m](const training::HealthReport& h) { m->OnHealth(h); };
    options->on_learning = [m](const training::LearningReport& l) { m->OnLearning(l); };
    options->on_recovery = [m](const training::RecoveryReport& r) { m->OnRecovery(r); };
  }
#else
  (void)device;
#endif
}

}  // namespace scdino::process
