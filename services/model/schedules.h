// Per-iteration schedules of DINO's utils.cosine_scheduler, in double precision.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace scdino::model {

/// numpy.linspace(start, stop, n): n values, the last exactly `stop`.
std::vector<double> Linspace(double start, double stop, int64_t n);

/// Linear warm-up from `start_warmup` over warmup_epochs*niter_per_ep
/// iterations, then a cosine from `base` to `final` over the remaining ones.
/// Length epochs*niter_per_ep. Throws when warm-up is longer than the run.
std::vector<double> CosineSchedule(double base, double final, int64_t epochs, int64_t niter_per_ep,
                                   int64_t warmup_epochs = 0, double start_warmup = 0.0);

/// Per-epoch teacher temperature: linspace(warmup, temp, warmup_epochs), then
/// `temp` for the remaining epochs.
std::vector<double> TeacherTempSchedule(double warmup_temp, double temp, int64_t warmup_epochs, int64_t epochs);

/// The three per-iteration schedules of a run.
struct Schedules {
  std::vector<double> lr, weight_decay, momentum;
};

struct ScheduleOptions {
  double lr = 0.0005;  ///< base lr before the batch scaling
  double min_lr = 1e-6;
  int64_t warmup_epochs = 10;
  double weight_decay = 0.04, weight_decay_end = 0.4;
  double momentum_teacher = 0.996;
  int64_t epochs = 100;
  int64_t niter_per_epoch = 1;
  int64_t global_batch = 256;  ///< batch_size_per_gpu * world_size
};

/// lr: cosine from lr*global_batch/256 to min_lr with warm-up; weight decay:
/// cosine from weight_decay to weight_decay_end; teacher momentum: cosine
/// from momentum_teacher to 1.
Schedules MakeSchedules(const ScheduleOptions& o);

}  // namespace scdino::model
