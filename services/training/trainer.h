// The single-process DINO training loop: schedules per iteration, one DINO
// step per batch, a JSON log line per epoch, atomic checkpoints, automatic
// and exact resume from the latest checkpoint.
#pragma once

#include <atomic>
#include <iosfwd>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/run_control.h"
#include "common/status.h"
#include "data/dataset.h"
#include "data/source.h"
#include "data/stats.h"
#include "model/dino.h"
#include "training/config.h"
#include "training/distributed.h"

namespace scdino::training {

/// What one training step did, for metrics (this rank's view).
struct StepReport {
  int64_t iteration = 0;  ///< iterations done after this step
  int64_t epoch = 0;
  int64_t images = 0;          ///< images this rank stepped on
  int64_t skipped_images = 0;  ///< bad images dropped from this rank's batch
  bool finite = true;          ///< false: a non-finite loss, the step was skipped
  double loss = 0.0, lr = 0.0, weight_decay = 0.0, momentum = 0.0, teacher_temp = 0.0;
  double step_seconds = 0.0;       ///< whole iteration, data included
  double data_wait_seconds = 0.0;  ///< waiting for the batch
  double allreduce_wait_seconds = 0.0;  ///< gradient communication not hidden by backward
};

struct CheckpointReport {
  std::string path;
  double seconds = 0.0;
  int64_t unix_ms = 0;
  int64_t iteration = 0;
};

struct TrainerOptions {
  /// Resume from <run_dir>/checkpoint.safetensors when it exists.
  bool resume = true;
  /// Stop (checkpoint, return) once this many iterations are done in total;
  /// -1: run to the end.
  int64_t stop_after_iterations = -1;
  /// Where the per-epoch JSON lines go besides <run_dir>/log.jsonl; may be null.
  std::ostream* log = nullptr;
  /// The process group of a distributed run; null for one process. Rank 0
  /// writes the log and the checkpoints; every rank takes the same stop and
  /// skip decisions.
  std::shared_ptr<Collective> collective;
  int64_t bucket_bytes = 25 << 20;
  /// The device to train on (a CUDA index per local rank); empty: the
  /// config's scdino.device, index 0.
  std::optional<torch::Device> device;
  /// Rank 0's control channel: status goes out, pause/stop/checkpoint
  /// requests come in and are agreed with the other ranks at every step
  /// boundary. May be null (then only RequestStop steers the run).
  RunControl* control = nullptr;
  /// Called on every rank after each step and each checkpoint it writes.
  std::function<void(const StepReport&)> on_step;
  std::function<void(const CheckpointReport&)> on_checkpoint;
};

struct TrainResult {
  bool completed = false;   ///< all epochs done (else stopped early, resumable)
  int64_t iteration = 0;    ///< iterations done in total
  double last_loss = 0.0;
  int64_t nonfinite_steps = 0;  ///< steps skipped for a non-finite loss
  std::string checkpoint;   ///< path of the last checkpoint written
};

/// The data source a config asks for, on `device`, sharded for (rank, world).
StatusOr<std::unique_ptr<data::MultiCropSource>> MakeSource(const TrainConfig& config, int64_t rank,
                                                            int64_t world_size, torch::Device device);

/// The indexed data set of a folder or csv data source.
StatusOr<data::Dataset> IndexDataset(const TrainConfig& config);

/// Channel statistics: read from config.stats_path() when it exists (and is
/// for the same channels), else computed and written there.
StatusOr<data::ChannelStats> LoadOrComputeStats(const TrainConfig& config, const data::Dataset& dataset,
                                                const data::ImagePrep& prep);

class Trainer {
 public:
  Trainer(TrainConfig config, std::unique_ptr<data::MultiCropSource> source, TrainerOptions options = {});

  /// Trains until the last epoch or a stop; errors (non-finite loss, a
  /// checkpoint that cannot be written) come back as a Status. The control
  /// channel ends in COMPLETED, STOPPED or FAILED.
  StatusOr<TrainResult> Run();

  /// Thread-safe: finish the current step, checkpoint, return from Run.
  void RequestStop() { stop_.store(true); }

  model::Dino& dino() { return *dino_; }

 private:
  /// Rank 0 writes; in a group every rank returns an error when it failed.
  Status WriteCheckpoint(const std::string& path, int64_t iteration, int64_t niter);
  StatusOr<TrainResult> RunLoop();
  void Publish(const std::function<void(RunStatus&)>& change);

  /// Sum of `values` over ranks (identity for one process).
  std::vector<double> SumOverRanks(std::vector<double> values);

  TrainConfig config_;
  std::unique_ptr<data::MultiCropSource> source_;
  std::unique_ptr<GradientAllReducer> reducer_;
  TrainerOptions options_;
  std::unique_ptr<model::Dino> dino_;
  torch::Device device_;
  std::atomic<bool> stop_{false};
};

/// Sets LibTorch's intra-op threads and OpenBLAS's threads (when it is the
/// BLAS in use) for a config value (0: all cores); returns the count set.
int ConfigureThreads(int64_t threads);

}  // namespace scdino::training
