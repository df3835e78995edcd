// The per-epoch JSON log line (<run_dir>/log.jsonl and the trainer's
// standard output): step reports accumulated over an epoch and summed over
// ranks, so the line speaks for the whole job. Not thread-safe: the training
// loop owns it.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <vector>

#include "training/reports.h"

namespace scdino::training {

class EpochLog {
 public:
  void Add(const StepReport& r);
  /// The line of `epoch`, ending at `iteration` after `seconds`, with the
  /// schedule values of its last step; `sum` sums values over ranks.
  nlohmann::json Line(int64_t epoch, int64_t iteration, double seconds, const StepReport& last,
                      const std::function<std::vector<double>(std::vector<double>)>& sum) const;
  /// DINO's log.txt line of an epoch's `line` (main_dino.py's keys, which
  /// its users' plotting scripts read): train_loss, train_lr, train_wd,
  /// epoch. lr and wd are the epoch's last step's (DINO averages them over
  /// the epoch).
  static nlohmann::json DinoLine(const nlohmann::json& line);
  /// Starts the next epoch.
  void Reset() { *this = EpochLog(); }

 private:
  double loss_sum_ = 0.0, data_wait_ = 0.0, allreduce_wait_ = 0.0;
  int64_t finite_steps_ = 0, nonfinite_ = 0, images_ = 0;
  model::HealthAverage health_;  // already global: the same on every rank
};

}  // namespace scdino::training
