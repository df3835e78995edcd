// The DINO training loop: schedules per iteration, one DINO step per batch,
// a JSON log line per epoch, checkpoints (training/checkpointer.h), exact
// resume from the latest checkpoint after checking the run's shape, and, on
// several ranks, one agreement per step on stopping, pausing and
// checkpointing. Its parts are separate so each can be read and tested on
// its own: the step (Step), the end of an epoch (EndOfEpoch), the agreement
// (LocalView, Act) and the state reporting (training/status_reporter.h).
// Not thread-safe, except RequestStop (one atomic store, signal-safe).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <optional>
#include <string>

#include "common/env.h"
#include "run/run_control.h"
#include "common/status.h"
#include "data/batch_source.h"
#include "model/dino.h"
#include "model/schedules.h"
#include "launch/coordinator.h"
#include "training/checkpointer.h"
#include "training/distributed.h"
#include "training/epoch_log.h"
#include "training/device_mark.h"
#include "training/readback.h"
#include "training/reports.h"
#include "training/status_reporter.h"
#include "training/train_plan.h"

namespace scdino::training {

struct TrainerOptions {
  /// Resume from <run_dir>/checkpoint.safetensors when it exists.
  bool resume = true;
  /// Stop (checkpoint, return) once this many iterations are done in total;
  /// -1: run to the end.
  int64_t stop_after_iterations = -1;
  /// Where the per-epoch JSON lines go besides <run_dir>/log.jsonl; may be null.
  std::ostream* log = nullptr;
  /// How the ranks meet (null: one process). Rank 0 writes the log and the
  /// checkpoints; every rank takes the same stop, pause and skip decisions.
  std::shared_ptr<run::Coordinator> coordinator;
  /// The process group of a distributed run (gradients, agreement); null
  /// for one process.
  std::shared_ptr<Collective> collective;
  int64_t bucket_bytes = 25 << 20;
  /// Rank 0's control channel: status goes out, pause/stop/checkpoint
  /// requests come in and are agreed with the other ranks at every step
  /// boundary. May be null (then only RequestStop steers the run).
  RunControl* control = nullptr;
  /// Called on every rank after each step, and on rank 0 after each
  /// checkpoint it writes.
  std::function<void(const StepReport&)> on_step;
  std::function<void(const CheckpointReport&)> on_checkpoint;
  /// Called on every rank after each logging interval (scdino.log_every).
  std::function<void(const HealthReport&)> on_health;
  /// Where rank 0 writes a progress line per logging interval; may be null.
  std::ostream* progress = nullptr;
  /// Rank 0's learning check of the teacher's backbone at the end of each
  /// epoch with a numbered checkpoint (trainer/learning_check.h); null:
  /// none; nullopt: skipped this time. Its report goes to the log line, the
  /// status and on_learning.
  std::function<std::optional<LearningReport>(model::VisionTransformer teacher, int64_t epoch, int64_t iteration)>
      learning_check;
  std::function<void(const LearningReport&)> on_learning;
  /// Called on every rank after a rollback (scdino.on_collapse: recover).
  std::function<void(const RecoveryReport&)> on_recovery;
};

/// Why a run returned before its last epoch.
enum class StopReason {
  kNone,            ///< it completed
  kIterationLimit,  ///< TrainerOptions::stop_after_iterations
  kApi,             ///< the control API (scdinoctl stop), on any rank's view
  kSignal,          ///< SIGTERM/SIGUSR1/SIGINT on some rank (preemption)
};

struct TrainResult {
  bool completed = false;   ///< all epochs done (else stopped early, resumable)
  StopReason stopped_by = StopReason::kNone;  ///< the same on every rank
  int64_t iteration = 0;    ///< iterations done in total
  double last_loss = 0.0;
  int64_t nonfinite_steps = 0;  ///< steps skipped for a non-finite loss
  std::string checkpoint;   ///< path of the last checkpoint written
  int64_t recoveries = 0;   ///< rollbacks after a collapse (on_collapse: recover)
  /// Rank 0: the last learning check, when one ran.
  std::optional<LearningReport> learning;
};

class Trainer {
  using Clock = std::chrono::steady_clock;

 public:
  /// Throws std::invalid_argument when the source's channels are not the
  /// plan's.
  Trainer(TrainPlan plan, std::unique_ptr<data::MultiCropSource> source, TrainerOptions options = {});
  /// Joins the data source's threads (the loader's) and releases the
  /// coordinator's sum over the process group.
  ~Trainer();

  /// Trains until the last epoch or a stop. Every error, an exception from
  /// a dead peer included, comes back as a Status and leaves the control
  /// status FAILED with the reason.
  StatusOr<TrainResult> Run();

  /// Signal-safe (one atomic store): finish the current step, checkpoint,
  /// return from Run.
  void RequestStop() { stop_.store(true); }
  /// The flag RequestStop sets, for process::ScopedStopFlag (signals).
  std::atomic<bool>* stop_flag() { return &stop_; }

  model::Dino& dino() { return *dino_; }

 private:
  StatusOr<TrainResult> RunLoop();
  /// The loop's start: the schedules, the checkpointer, the resume, the log
  /// files; returns the iteration to go on from.
  StatusOr<int64_t> Start();
  /// A read step counted: the result, the epoch's log, the interval, the
  /// reports.
  void Count(const StepReport& report);
  /// The epoch's log line (with the learning check when one is due), on
  /// rank 0 to log.jsonl and TrainerOptions::log.
  Status LogEpoch(int64_t epoch, int64_t it, double seconds, const StepReport& last);
  /// Acts on the agreement once every queued step is read (Act) and says
  /// whether the loop stops there (after a resume checkpoint).
  StatusOr<StopReason> Stop(int64_t it);
  /// Loads the latest checkpoint (after checking the run's shape); returns
  /// the iteration to continue from, and sets loop_.resumed.epoch_start to where that
  /// epoch's batches start (a position of its own on another global batch).
  StatusOr<int64_t> Resume();
  /// Samples of the current epoch's order trained on after iteration `it`.
  int64_t EpochPosition(int64_t it) const;
  /// scdino.log_samples: this step's indices and schedule values.
  Status LogSamples(int64_t it, const torch::Tensor& indices, const model::StepInput& in);
  /// Queues iteration `it` on the device (the batch, the DINO step) without
  /// reading anything of it; its values are read by Complete.
  Status Launch(int64_t it);
  /// The report of the oldest queued step: its values read back (after the
  /// next step was queued, the device does not wait for that) and the
  /// agreement it carried merged into loop_.agreed.
  StatusOr<StepReport> Complete();
  /// Whether the steps queued so far must all be read before the next is
  /// queued: a step after which something needs its values at once (a
  /// logging interval or an epoch ends, the run or its iteration limit
  /// ends, a stop, pause or checkpoint was agreed).
  bool MustDrain(int64_t launched) const;
  /// The log line, the checkpoints of the epoch that ended at `it`.
  Status EndOfEpoch(int64_t epoch, int64_t it);
  /// This rank's view of the requests: its signals, rank 0's control API
  /// and checkpoint clock.
  run::Agreement LocalView() const;
  /// Acts on what the ranks agreed after the step that ended at `it`:
  /// API checkpoints, pauses (agreeing again every 200 ms); the reason to
  /// stop, if any.
  StatusOr<StopReason> Act(run::Agreement agreed, int64_t it);
  /// At the end of a logging interval: the progress line, the health
  /// report and the collapse verdict; an error when the run collapsed and
  /// scdino.on_collapse is stop (after a resume checkpoint).
  Status EndOfInterval(int64_t it, const StepReport& last);
  /// Rank 0 at the end of an epoch with a numbered checkpoint: the learning
  /// check, reported; null when none is due.
  std::optional<LearningReport> CheckLearning(int64_t epoch, int64_t it);
  /// The model (and gradient reducer) built anew from plan_: after the
  /// settings changed, before a checkpoint is loaded into it.
  void RebuildModel();
  /// The schedules over steps_.niter iterations an epoch on this world.
  Status RebuildSchedules(const std::string& when);
  /// Edits plan_ by `settings` (ApplySettings; `what` names where they come
  /// from) and rebuilds what they shape; records them for the checkpoints
  /// (a resume applies them again).
  Status ApplyRecoverySettings(const std::vector<SettingChange>& settings, const std::string& what);
  /// on_collapse: recover: back to the last checkpoint judged healthy, with
  /// safer settings (SaferSettings) for `verdict`; returns the iteration to
  /// go on from.
  StatusOr<int64_t> Rollback(const std::string& verdict, int64_t it);
  /// Rank 0's choice of where a rollback goes: "healthy" (the last epoch
  /// end judged healthy) or "start"; Diverged when neither may be taken.
  StatusOr<std::string> RollbackTarget(const std::string& verdict, int64_t it) const;
  /// Rank 0: the healthy checkpoint at `path` loaded, and what it holds as
  /// JSON for the other ranks.
  StatusOr<std::string> LoadRollbackPoint(const std::string& path);
  /// Every rank: rank 0's rollback point taken (its weights, its place in
  /// the epoch's order); returns the iteration to go on from.
  StatusOr<int64_t> TakeRollbackPoint(const std::string& path);
  /// The rollback said on rank 0's progress stream and reported.
  void ReportRecovery(const RecoveryReport& r);
  /// Out of memory at the current iteration (`what`: the allocator's words):
  /// InvalidArgument naming the batch, the crops, the model and the peak
  /// memory, and what to lower (exit code 2: the config is the cure).
  Status OutOfMemory(const std::string& what) const;
  /// Rank 0's model and optimizer state on every rank (after rank 0 alone
  /// loaded a rollback point); `tensors`: rank 0's [name, dtype, shape]s.
  Status TakeRankZeroState(const nlohmann::json& tensors);
  /// Where this run goes on from a checkpoint saved at `info`'s run shape:
  /// sets loop_.resumed.epoch_start and .epoch (a resume, a rollback).
  struct Place {
    int64_t iteration = 0, epoch = 0, position = 0;
  };
  StatusOr<Place> PlaceAt(const CheckpointInfo& info, const std::string& path);

  // Constant after construction.
  std::unique_ptr<data::MultiCropSource> source_;
  TrainerOptions options_;
  std::shared_ptr<run::Coordinator> coordinator_;
  torch::Device device_;
  std::atomic<bool> stop_{false};  ///< RequestStop's, from any thread

  // The plan and what is built from it: edited only by a collapse recovery
  // (ApplyRecoverySettings), which rebuilds the rest.
  TrainPlan plan_;
  std::unique_ptr<model::Dino> dino_;
  std::unique_ptr<GradientAllReducer> reducer_;
  /// Set once the loop starts: batches per epoch, iterations in all, and
  /// the schedules over them.
  struct Steps {
    int64_t niter = 1, total = 1;
    model::Schedules schedules;
  } steps_;

  // Owned by the loop (loop_), and its parts.
  /// Where this process resumed (a resume, a rollback).
  struct Resumed {
    int64_t from = 0;            ///< the iteration it resumed from (0: it started afresh)
    bool under_recover = false;  ///< that checkpoint was trained under on_collapse: recover
    /// Where the current epoch's batches start; `epoch` is the epoch a
    /// resume set it for (-1: none pending).
    data::EpochStart epoch_start;
    int64_t epoch = -1;
  };
  /// The logging interval's steps so far (every step, skipped ones too):
  /// their health and loss, time and wait for data, for the progress line.
  struct Interval {
    model::HealthAverage health;
    double loss = 0.0;
    int64_t steps = 0;
    double seconds = 0.0, data_wait = 0.0;
  };
  /// The collapse verdicts and the recoveries from them.
  struct Recovery {
    std::string collapse;  ///< the last verdict ("" before the first)
    std::string rollback;  ///< a verdict the loop rolls back from after this step (recover)
    int64_t count = 0;
    std::vector<SettingChange> settings;  ///< of the recoveries so far, in order (later ones win)
  };
  /// The queued steps: what the host knows of each, and its values on the way.
  struct Pending {
    StepReport report;
    Readback values;
    Clock::time_point launched;
    /// On a GPU: the step's stream once its crops are ready, and after its
    /// work was queued (training/device_mark.h).
    DeviceMark ready, done;
  };
  struct Loop {
    Resumed resumed;
    Interval interval;
    Recovery recovery;
    std::deque<Pending> pending;
    /// The previous step's `done` while steps follow one another without a
    /// drain (the device's gap from it to the next step's `ready` is that
    /// step's data wait); empty after a drain.
    DeviceMark last_done;
    /// What the ranks agreed in the exchanges of the steps read since the
    /// last Act (requests are acted on once every queued step is read).
    run::Agreement agreed;
    Clock::time_point epoch_began;  ///< pauses excluded
    TrainResult result;
  } loop_;

  // Where the run is written and reported.
  struct Outputs {
    explicit Outputs(RunControl* control) : reporter(control) {}
    StatusReporter reporter;
    std::unique_ptr<Checkpointer> checkpointer;
    EpochLog epoch_log;
    std::unique_ptr<WritableFile> epoch_file;  ///< rank 0's log.jsonl
    std::unique_ptr<WritableFile> dino_log;    ///< rank 0's log.txt, as DINO writes it
    std::unique_ptr<WritableFile> samples;     ///< samples/rank<N>.jsonl (scdino.log_samples)
  } out_;
};

}  // namespace scdino::training
