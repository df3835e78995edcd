// Following a training run from another service (scdino-eval --follow,
// scdino-features --follow): the trainer's control API, found through the
// run directory's endpoint file and token, says when checkpoints appear
// (WatchStatus) and which are complete (ListCheckpoints: only files renamed
// into place, never a half-written one) and when the run has ended. An
// unreachable trainer (not started yet, between requeues, restarting) is
// retried with a growing pause, and the log says so. Thread-compatible: one
// service loop uses it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "run/checkpoint_files.h"
#include "run/run_control.h"
#include "common/status.h"

namespace scdino::process {

struct FollowOptions {
  std::string run_dir;
  /// The run's token when it is not <run_dir>/control.token.
  std::string token_file;
  /// True once the follower should stop (a signal, its own control API).
  std::function<bool()> should_stop;
  /// Pauses between attempts to reach the trainer grow from `first_retry`
  /// to `max_retry`; after `give_up` without an answer the follower fails.
  std::chrono::milliseconds first_retry{500};
  std::chrono::milliseconds max_retry{std::chrono::seconds(30)};
  std::chrono::milliseconds give_up{std::chrono::hours(2)};
  std::ostream* log = nullptr;
  std::string program = "scdino-follow";
};

/// What Next() found.
struct FollowEvent {
  /// Complete checkpoints not returned before, oldest first (the numbered
  /// epoch checkpoints and API snapshots; not the moving resume point).
  std::vector<CheckpointEntry> checkpoints;
  /// The trainer has ended (COMPLETED, STOPPED or FAILED): nothing more
  /// will come after these checkpoints.
  bool ended = false;
  RunState final_state = RunState::kRunning;
  std::string error;  ///< the trainer's error when FAILED
};

class CheckpointFollower {
 public:
  explicit CheckpointFollower(FollowOptions options);
  ~CheckpointFollower();

  /// Blocks until new checkpoints exist, the trainer has ended, or a stop
  /// (Aborted). Unavailable when the trainer stayed unreachable for
  /// `give_up`; FailedPrecondition when its endpoint cannot be trusted.
  StatusOr<FollowEvent> Next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Follows a trainer to its end: `each` for every complete checkpoint,
/// oldest first, those already written included. Ok once the trainer has
/// ended (the log says how); else the first error of `each` or of the
/// following (Aborted after a stop).
Status FollowCheckpoints(FollowOptions options, const std::function<Status(const CheckpointEntry&)>& each);

/// The checkpoints worth following in a list: numbered ones
/// (checkpointNNNN) and snapshots (checkpoint_itNNNNNNNN), not the resume
/// point checkpoint.safetensors, which a later write replaces.
bool IsFollowedCheckpoint(const std::string& path);

}  // namespace scdino::process
