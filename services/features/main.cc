// scdino-features: the CLS features of every image of a run's data set for
// one or more checkpoints, or for each checkpoint a running trainer writes
// (--follow) (docs/features.md). Wiring only: flags, config, launch, the
// feature run (data set, statistics, split), a backbone and ExtractFeatures
// per checkpoint, exit code.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "run/checkpoint_files.h"
#include "features/feature_job.h"
#include "launch/coordinator.h"
#include "launch/environment.h"
#include "plan/source.h"
#include "process/checkpoint_follower.h"
#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/shutdown.h"
#include "process/signals.h"

namespace {

using namespace scdino::process;  // the exit codes, CommandLine, Fail
namespace fs = std::filesystem;
constexpr const char* kProgram = "scdino-features";

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals(kProgram, "finishing the current batch (complete shards are kept)");
  std::string key;
  std::vector<std::string> checkpoints;
  bool all = false, random_init = false, raw_pixels = false, raw = false, follow = false;
  CommandLine cl(kProgram,
                 "CLS features of every image of the run's data set (docs/features.md). Output:\n"
                 "<run_dir>/features/<checkpoint name>/ (features.npy, index.csv, metadata.json, features.h5ad).\n" +
                     scdino::process::ExitCodesHelp(kProgram));
  auto& app = cl.app();
  app.add_option("--checkpoint", checkpoints,
                 "a checkpoint or converted weights file (repeatable); default: <run_dir>/checkpoint.safetensors")
      ->type_name("PATH");
  app.add_flag("--all-checkpoints", all, "every checkpoint of the run directory (checkpoint*.safetensors), oldest first");
  app.add_flag("--follow", follow,
               "follow the run's trainer through its control API: every numbered checkpoint it has written and "
               "writes, until it ends (one process)");
  app.add_flag("--random-init", random_init, "also a randomly initialised backbone (seed meta.seed): a baseline");
  app.add_flag("--raw-pixels", raw_pixels,
               "also the images themselves as features (prepared as for the model, area-averaged to at most 4,096 "
               "values): the other baseline, written to features/raw_pixels");
  app.add_option("--checkpoint-key", key, "teacher (as scDINO) or student; default: compute_cls_features.checkpoint_key")
      ->check(CLI::IsMember({"teacher", "student"}));
  app.add_flag("--raw", raw, "also write features_raw.npy (before L2 normalisation)");
  if (auto code = cl.Parse(argc, argv)) return *code;
  std::vector<scdino::run::KeyValue> flags;
  if (raw) flags.push_back({"scdino.features.write_raw", "true"});
  const auto settings = cl.RunSettings(flags);
  if (!settings) return kExitBadInput;
  const auto& config = *settings;
  if (key.empty()) key = config.downstream.checkpoint_key;
  if (follow && (all || !checkpoints.empty())) {
    std::cerr << kProgram << ": --follow takes the trainer's checkpoints; drop --checkpoint and --all-checkpoints\n";
    return kExitBadInput;
  }
  if (all) {
    for (const auto& e : scdino::ListCheckpointFiles(config.run_dir())) checkpoints.push_back(e.path);
  }
  if (checkpoints.empty() && !random_init && !raw_pixels && !follow) {
    checkpoints.push_back(config.run_dir() + "/checkpoint.safetensors");
  }
  for (const auto& c : checkpoints) {
    if (!fs::exists(c)) {
      std::cerr << kProgram << ": checkpoint " << c << " does not exist (train first, or pass --checkpoint PATH)\n";
      return kExitBadInput;
    }
  }
  if (random_init) checkpoints.push_back("");  // a baseline, named random_init
  if (raw_pixels) checkpoints.push_back(scdino::features::kRawPixels);
  const int n_threads = cl.ConfigureCpu();
  // Every part with threads lives in the work's scope and is stopped as it
  // ends (the control API and metrics, then the rendezvous); then the
  // process ends without library destructors (process/shutdown.h).
  const int code = GuardMain(kProgram, [&]() -> int {
    auto launch = scdino::run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) return Fail(nullptr, kProgram, launch.status());
    if (follow && launch->world_size > 1) {
      std::cerr << kProgram << ": --follow runs as one process; this launch has " << launch->world_size << " ranks\n";
      return kExitBadInput;
    }
    auto device = scdino::run::PickDevice(config, *launch);
    if (!device.ok()) return Fail(nullptr, kProgram, device.status());
    std::cerr << kProgram << ": run " << config.run_dir() << ", rank " << launch->rank << " of " << launch->world_size
              << ", device " << device->device << " (" << device->why << "), " << n_threads << " CPU threads\n";
    if (auto s = scdino::run::PrepareRunDir(config); !s.ok()) return Fail(nullptr, kProgram, s);
    // One process meets no one: no store on MASTER_PORT, which Enroot's
    // PyTorch hook sets per job, so a follower beside the trainer's rank 0
    // on the same node would otherwise try to bind the trainer's port.
    scdino::StatusOr<std::shared_ptr<scdino::run::Coordinator>> coordinator = scdino::run::Coordinator::Single();
    if (launch->world_size > 1) {
      coordinator =
          scdino::run::Rendezvous(config, *launch, std::chrono::seconds(config.scdino.distributed_timeout_s),
                                 StopSignalReceived);
    }
    if (!coordinator.ok()) return Fail(nullptr, kProgram, coordinator.status());
    auto plane = ServicePlane::Start(config, *launch, {"features", "images", "features"});
    if (!plane.ok()) return Fail(nullptr, kProgram, plane.status());
    ServicePlane* p = plane->get();
    auto stop = [p] { return StopSignalReceived() || p->control().Requests().stop; };
    auto dataset = scdino::run::IndexDataset(config, launch->rank == 0 ? &std::cerr : nullptr);
    if (!dataset.ok()) return Fail(p, kProgram, dataset.status());
    auto run = scdino::features::PrepareFeatureRun(config, std::move(dataset).value(), cl.config_path(), *launch,
                                                   **coordinator, stop);
    if (!run.ok()) return Fail(p, kProgram, run.status());

    scdino::features::ExtractHooks hooks;
    hooks.control = launch->rank == 0 ? &p->control() : nullptr;
    hooks.coordinator = coordinator->get();
    hooks.stop_signal = StopSignalReceived;
    hooks.on_progress = [p](int64_t done, int64_t total) { p->ReportProgress(done, total); };
    hooks.log = &std::cerr;
    hooks.program = kProgram;
    auto extract = [&](const std::string& checkpoint) {
      return scdino::features::ExtractCheckpoint(config, *run, checkpoint, key, *launch, device->device, hooks)
          .status();
    };
    for (const auto& c : checkpoints) {
      if (auto s = extract(c); !s.ok()) return Fail(p, kProgram, s);
    }
    if (follow) {
      FollowOptions fo;
      fo.run_dir = config.run_dir();
      fo.token_file = config.scdino.control.token_file;
      fo.should_stop = stop;
      fo.log = &std::cerr;
      fo.program = kProgram;
      auto s = FollowCheckpoints(fo, [&](const scdino::CheckpointEntry& c) { return extract(c.path); });
      if (!s.ok()) return Fail(p, kProgram, s);
    }
    p->Finish(scdino::RunState::kCompleted);
    return kExitCompleted;
  });
  EndProcess(kProgram, code);
}
