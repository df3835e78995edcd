// When and where the trainer writes checkpoints, and that every rank learns
// the outcome: the resume point (checkpoint.safetensors) at every epoch end,
// every scdino.checkpoint_every_minutes and before a stop; numbered ones
// (checkpointNNNN) every saveckp_freq epochs and after the last, of which the
// newest scdino.keep_checkpoints are kept; snapshots asked for through the
// control API (checkpoint_itNNNNNNNN). Rank 0 writes; a write that fails
// stops every rank at once. Not thread-safe: the training loop owns it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"
#include "model/dino.h"
#include "launch/coordinator.h"
#include "training/checkpoint.h"
#include "training/reports.h"

namespace scdino::training {

struct CheckpointPolicy {
  int64_t every_epochs = 20;   ///< numbered checkpoints (saveckp_freq)
  int64_t keep = 0;            ///< numbered checkpoints kept; 0: all
  double every_minutes = 0.0;  ///< time-based resume points; 0: off
};

class Checkpointer {
 public:
  /// `info` carries what every checkpoint records besides the iteration
  /// (config text, classes, run shape); `on_written` sees each one rank 0
  /// wrote.
  Checkpointer(std::string run_dir, CheckpointPolicy policy, run::Coordinator& coordinator, model::Dino& dino,
               CheckpointInfo info, std::function<void(const CheckpointReport&)> on_written = {});

  const std::string& latest() const { return latest_; }
  /// "checkpoint0004.safetensors" for epoch 4 (the last epoch it holds).
  std::string NumberedPath(int64_t epoch) const;
  std::string SnapshotPath(int64_t iteration) const;

  /// At the end of `epoch` (0-based): the resume point, and the numbered
  /// checkpoint when due (then older ones beyond `keep` are removed).
  Status EndOfEpoch(int64_t epoch, int64_t iteration, int64_t niter, bool last);
  /// The resume point (time-based, or before a stop).
  Status ResumePoint(int64_t iteration, int64_t niter);
  /// A kept snapshot named by its iteration and the resume point; returns
  /// the snapshot's path.
  StatusOr<std::string> Snapshot(int64_t iteration, int64_t niter);
  /// Rank 0: whether the time-based interval has passed since the last write.
  bool TimeDue() const;
  /// What the next checkpoints record as CheckpointInfo::epoch_position.
  void set_epoch_position(int64_t position) { info_.epoch_position = position; }
  /// What the next checkpoints record as CheckpointInfo::recoveries_json.
  void set_recoveries(std::string json) { info_.recoveries_json = std::move(json); }
  /// last_healthy.safetensors: the last resume point judged healthy,
  /// what scdino.on_collapse: recover rolls back to.
  std::string HealthyPath() const { return run_dir_ + "/last_healthy.safetensors"; }
  /// Rank 0 keeps the resume point just written as HealthyPath (a hard
  /// link, replaced atomically); every rank gets the outcome.
  Status KeepAsHealthy();

 private:
  /// Rank 0 writes `path`; every rank gets the outcome.
  Status Write(const std::string& path, int64_t iteration, int64_t niter);
  void Retain();

  std::string run_dir_, latest_;
  CheckpointPolicy policy_;
  run::Coordinator& coordinator_;
  model::Dino& dino_;
  CheckpointInfo info_;
  std::function<void(const CheckpointReport&)> on_written_;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

}  // namespace scdino::training
