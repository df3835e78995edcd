// The meeting point of a service's work loop and its control API: the loop
// publishes its status here and polls the requests (pause, resume, stop,
// checkpoint) that callers file; the gRPC server (control layer) reads and
// files through it. No gRPC here, so the LibTorch layers can use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino {

enum class RunState {
  kStarting,
  kRunning,
  kPausing,  ///< a pause is requested; the loop has not reached its boundary yet
  kPaused,
  kCheckpointing,
  kStopping,
  kCompleted,
  kFailed,
  kStopped
};
const char* RunStateName(RunState s);  ///< "STARTING", ...
inline bool IsFinal(RunState s) {
  return s == RunState::kCompleted || s == RunState::kFailed || s == RunState::kStopped;
}

/// What the trainer alone reports (the status' `trainer` part, which the
/// control API sends for the trainer only).
struct TrainerRunStatus {
  double loss = 0.0, learning_rate = 0.0, weight_decay = 0.0, teacher_temperature = 0.0, teacher_momentum = 0.0;
  std::string last_checkpoint;
  int64_t last_checkpoint_unix_ms = 0;
  int64_t nonfinite_steps = 0;
  /// DINO health over the last logging interval (model/health.h,
  /// docs/training.md), and the collapse verdict: healthy,
  /// uniform_collapse, onehot_collapse; empty before it is first judged.
  double teacher_entropy = 0.0, teacher_entropy_ratio = 0.0, student_teacher_kl = 0.0;
  double teacher_batch_entropy = 0.0, center_norm = 0.0, backbone_cls_std = 0.0;
  std::string collapse;
  /// The last learning check: epoch, the teacher's, a random ViT's and the
  /// raw pixels' 20-NN top-1 on held-out images (learning_check_epoch 0:
  /// none yet), the margin and the verdict (run/learning_verdict.h).
  int64_t learning_check_epoch = 0;
  double knn_top1 = 0.0, knn_random_top1 = 0.0, knn_pixels_top1 = 0.0, learning_margin = 0.0;
  std::string learning_verdict;
  /// Rollbacks after a collapse (on_collapse: recover), the limit, and the last.
  int64_t recoveries = 0, max_recoveries = 0;
  std::string last_recovery;
};

/// A snapshot of a run (the fields of scdino.v1.Status): what every
/// service reports (its state, progress and long stage), and the trainer's
/// own part.
struct RunStatus {
  RunState state = RunState::kStarting;
  std::string error;
  // Progress.
  int64_t epoch = 0, epochs = 0, iteration = 0, iterations = 0;
  int64_t items_done = 0, items_total = 0;
  double items_per_second = 0.0, eta_seconds = 0.0;
  /// The long stage in progress or last finished (common/progress.h).
  std::string stage, stage_unit;
  int64_t stage_done = 0, stage_total = 0;
  double stage_per_second = 0.0, stage_eta_seconds = 0.0;
  bool stage_finished = false;
  /// The trainer's own part; the other services leave it empty.
  TrainerRunStatus trainer;
  /// Increases with every Update.
  int64_t revision = 0;
};

/// What callers asked for since the loop last looked.
struct RunRequests {
  bool pause = false;       ///< be paused (true until Resume)
  bool stop = false;
  bool checkpoint = false;  ///< at least one SaveCheckpoint is waiting
};

/// Thread-safe: the work loop, the server's handler threads and signal
/// watchers use one instance.
class RunControl {
 public:
  // Work-loop side.
  /// Changes the status under the lock and wakes watchers.
  void Update(const std::function<void(RunStatus&)>& change);
  RunRequests Requests() const;
  /// Answers every waiting SaveCheckpoint with a path or an error.
  void CompleteCheckpoints(const StatusOr<std::string>& result, int64_t iteration);
  /// Blocks until a request changes or `timeout` passes (a paused loop).
  void WaitForRequest(std::chrono::milliseconds timeout);
  /// For a batch service's loop, between units of work: blocks while a
  /// pause is requested (state PAUSED, then RUNNING again); true once a stop
  /// is requested or `stop_also` says so (state STOPPING).
  bool HoldWhilePaused(const std::function<bool()>& stop_also = {});

  // Caller side (the API). Requests after a final state are refused.
  Status Pause();
  Status Resume();
  Status Stop();
  struct CheckpointResult {
    std::string path;
    int64_t iteration = 0;
  };
  /// Filed; the loop writes at its next step boundary.
  StatusOr<std::future<StatusOr<CheckpointResult>>> RequestCheckpoint();

  RunStatus Snapshot() const;
  /// Waits until the revision exceeds `after` or `timeout` passes; returns
  /// the snapshot either way.
  RunStatus WaitForChange(int64_t after, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  RunStatus status_;
  RunRequests requests_;
  std::vector<std::promise<StatusOr<CheckpointResult>>> checkpoint_waiters_;
};

}  // namespace scdino
