// One rank of scdino-trainer from its resolved command line to its exit
// code: launch, device, run directory, elastic resume, rendezvous, process
// group, service plane, the data and the loop's plan, the run, and its last
// lines. Its threads live in TrainerParts, which the main ends in order
// (process/shutdown.h) however the run ended.
#pragma once

#include <memory>
#include <vector>

#include "config/config.h"
#include "launch/coordinator.h"
#include "process/service_plane.h"
#include "process/shutdown.h"
#include "trainer/learning_check.h"
#include "training/trainer.h"

namespace scdino::trainer {

// Every part of the process that runs threads, held by the main rather than
// on the stack of the work so that the shutdown stops them in a fixed order
// however the work ended (done, stopped, failed, an exception).
struct TrainerParts {
  std::shared_ptr<run::Coordinator> coordinator;         // rank 0: the store's server thread
  std::shared_ptr<training::Collective> collective;      // Gloo's or NCCL's threads
  std::unique_ptr<process::ServicePlane> plane;          // gRPC, the exporter, the state watcher
  std::shared_ptr<LearningCheck> check;
  std::unique_ptr<training::Trainer> trainer;            // the data loader's threads

  /// Each part after what uses it: the trainer (and its loader) first, the
  /// store last, since other ranks' groups may still speak to it until
  /// theirs end.
  std::vector<process::ShutdownStage> Stages();
};

/// Trains this rank of `config` with `options` (the command line's) on
/// `threads` CPU threads, its parts in `parts`; returns the exit code
/// (docs/exit-codes.md) after saying why on stderr.
int RunTrainerRank(const run::RunConfig& config, training::TrainerOptions options, int threads, TrainerParts& parts);

}  // namespace scdino::trainer
