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
#include "jobs/feature_job.h"
#include "launch/coordinator.h"
#include "launch/environment.h"
#include "plan/source.h"
#include "process/checkpoint_follower.h"
#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/service.h"
#include "process/signals.h"
#include "programs/mains.h"

namespace scdino::programs::features_main {

namespace {

using namespace scdino::process;  // the exit codes, CommandLine, RunService
namespace fs = std::filesystem;
constexpr const char* kProgram = "scdino-features";

struct Flags {
  std::string key;
  std::vector<std::string> checkpoints;
  bool all = false, random_init = false, raw_pixels = false, raw = false, follow = false;
};

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("--checkpoint", f->checkpoints,
                 "a checkpoint or converted weights file (repeatable); default: <run_dir>/checkpoint.safetensors")
      ->type_name("PATH");
  app.add_flag("--all-checkpoints", f->all,
               "every checkpoint of the run directory (checkpoint*.safetensors), oldest first");
  app.add_flag("--follow", f->follow,
               "follow the run's trainer through its control API: every numbered checkpoint it has written and "
               "writes, until it ends (one process)");
  app.add_flag("--random-init", f->random_init, "also a randomly initialised backbone (seed meta.seed): a baseline");
  app.add_flag("--raw-pixels", f->raw_pixels,
               "also the images themselves as features (prepared as for the model, area-averaged to at most 4,096 "
               "values): the other baseline, written to features/raw_pixels");
  app.add_option("--checkpoint-key", f->key,
                 "teacher (as scDINO) or student; default: compute_cls_features.checkpoint_key")
      ->check(CLI::IsMember({"teacher", "student"}));
  app.add_flag("--raw", f->raw, "also write features_raw.npy (before L2 normalisation)");
}

// What to extract, in order: the checkpoints asked for (or the run's
// latest), then the baselines; an error naming a flag or a missing file.
scdino::StatusOr<std::vector<std::string>> CheckpointsToExtract(const Flags& f, const std::string& run_dir) {
  if (f.follow && (f.all || !f.checkpoints.empty())) {
    return scdino::Status::InvalidArgument(
        "--follow takes the trainer's checkpoints; drop --checkpoint and --all-checkpoints");
  }
  std::vector<std::string> out = f.checkpoints;
  if (f.all) {
    for (const auto& e : scdino::ListCheckpointFiles(run_dir)) out.push_back(e.path);
  }
  if (out.empty() && !f.random_init && !f.raw_pixels && !f.follow) out.push_back(run_dir + "/checkpoint.safetensors");
  for (const auto& c : out) {
    if (!fs::exists(c)) {
      return scdino::Status::InvalidArgument("checkpoint " + c +
                                             " does not exist (train first, or pass --checkpoint PATH)");
    }
  }
  if (f.random_init) out.push_back("");  // a baseline, named random_init
  if (f.raw_pixels) out.push_back(scdino::jobs::kRawPixels);
  return out;
}

}  // namespace

int Main(int argc, char** argv) {
  InstallStopSignals(kProgram, "finishing the current batch (complete shards are kept)");
  CommandLine cl(kProgram,
                 "CLS features of every image of the run's data set (docs/features.md). Output:\n"
                 "<run_dir>/features/<checkpoint name>/ (features.npy, index.csv, metadata.json, features.h5ad).\n" +
                     ExitCodesHelp(kProgram));
  Flags f;
  AddFlags(cl.app(), &f);
  if (auto code = cl.Parse(argc, argv)) return *code;
  std::vector<scdino::run::KeyValue> flags;
  if (f.raw) flags.push_back({"scdino.features.write_raw", "true"});
  const auto settings = cl.RunSettings(flags);
  if (!settings) return kExitBadInput;
  const auto& config = *settings;
  const std::string key = f.key.empty() ? config.downstream.checkpoint_key : f.key;
  const auto checkpoints = CheckpointsToExtract(f, config.run_dir());
  if (!checkpoints.ok()) return Fail(nullptr, kProgram, checkpoints.status());
  ServiceSpec spec{kProgram, false, nullptr, ServiceOptions{"features", "images", "features"}};
  spec.check_launch = [&](const scdino::run::LaunchInfo& launch) {
    return f.follow && launch.world_size > 1
               ? scdino::Status::InvalidArgument("--follow runs as one process; this launch has " +
                                                 std::to_string(launch.world_size) + " ranks")
               : scdino::Status::Ok();
  };
  RunService(spec, config, cl.ConfigureCpu(), [&](Service& s) -> int {
    ServicePlane* p = s.plane.get();
    auto stop = [&s] { return s.Stopping(); };
    auto dataset = scdino::run::IndexDataset(config, s.launch.rank == 0 ? &std::cerr : nullptr);
    if (!dataset.ok()) return s.Fail(dataset.status());
    auto run = scdino::jobs::PrepareFeatureRun(config, std::move(dataset).value(), cl.config_path(), s.launch,
                                               *s.coordinator, stop);
    if (!run.ok()) return s.Fail(run.status());
    scdino::jobs::ExtractHooks hooks;
    hooks.control = s.launch.rank == 0 ? &p->control() : nullptr;
    hooks.coordinator = s.coordinator.get();
    hooks.stop_signal = StopSignalReceived;
    hooks.on_progress = [p](int64_t done, int64_t total) { p->ReportProgress(done, total); };
    hooks.log = &std::cerr;
    hooks.program = kProgram;
    auto extract = [&](const std::string& checkpoint) {
      return scdino::jobs::ExtractCheckpoint(config, *run, checkpoint, key, s.launch, s.device.device, hooks)
          .status();
    };
    for (const auto& c : *checkpoints) {
      if (auto st = extract(c); !st.ok()) return s.Fail(st);
    }
    if (f.follow) {
      auto st = FollowCheckpoints(FollowOptionsFor(config, kProgram, stop),
                                  [&](const scdino::CheckpointEntry& c) { return extract(c.path); });
      if (!st.ok()) return s.Fail(st);
    }
    p->Finish(scdino::RunState::kCompleted, "", kExitCompleted);
    return kExitCompleted;
  });
}

}  // namespace scdino::programs::features_main
