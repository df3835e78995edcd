#include "model/schedules.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace scdino::model {

std::vector<double> Linspace(double start, double stop, int64_t n) {
  std::vector<double> out;
  if (n <= 0) return out;
  out.reserve(n);
  if (n == 1) return {start};
  const double step = (stop - start) / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<double>(i) * step + start);
  out.back() = stop;
  return out;
}

std::vector<double> CosineSchedule(double base, double final, int64_t epochs, int64_t niter_per_ep,
                                   int64_t warmup_epochs, double start_warmup) {
  const int64_t total = epochs * niter_per_ep;
  const int64_t warmup_iters = warmup_epochs * niter_per_ep;
  if (warmup_iters > total) {
    throw std::invalid_argument("warm-up of " + std::to_string(warmup_epochs) + " epochs is longer than the run of " +
                                std::to_string(epochs) + " epochs");
  }
  std::vector<double> s;
  if (warmup_epochs > 0) s = Linspace(start_warmup, base, warmup_iters);
  const int64_t n = total - warmup_iters;
  const double pi = std::acos(-1.0);
  for (int64_t i = 0; i < n; ++i) {
    s.push_back(final + 0.5 * (base - final) * (1.0 + std::cos(pi * static_cast<double>(i) / static_cast<double>(n))));
  }
  return s;
}

std::vector<double> TeacherTempSchedule(double warmup_temp, double temp, int64_t warmup_epochs, int64_t epochs) {
  if (warmup_epochs > epochs) {
    throw std::invalid_argument("warmup_teacher_temp_epochs " + std::to_string(warmup_epochs) +
                                " exceeds the run's " + std::to_string(epochs) + " epochs");
  }
  std::vector<double> s = Linspace(warmup_temp, temp, warmup_epochs);
  s.resize(static_cast<size_t>(epochs), temp);
  return s;
}

Schedules MakeSchedules(const ScheduleOptions& o) {
  Schedules s;
  s.lr = CosineSchedule(o.lr * static_cast<double>(o.global_batch) / 256.0, o.min_lr, o.epochs, o.niter_per_epoch,
                        o.warmup_epochs);
  s.weight_decay = CosineSchedule(o.weight_decay, o.weight_decay_end, o.epochs, o.niter_per_epoch);
  s.momentum = CosineSchedule(o.momentum_teacher, 1.0, o.epochs, o.niter_per_epoch);
  return s;
}

}  // namespace scdino::model
