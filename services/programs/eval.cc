// scdino-eval: weighted kNN, per-class metrics and plots of the features
// scdino-features wrote, or of each checkpoint a running trainer writes
// (--follow: features extracted here, then evaluated) (docs/eval.md).
// Wiring only: flags, config, which features, a CheckpointEvaluator, the
// per-checkpoint table and metrics, exit code.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "programs/eval_wiring.h"
#include "features/feature_set.h"
#include "jobs/checkpoint_evaluator.h"
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

namespace scdino::programs::eval_main {

namespace {

using namespace scdino::process;  // the exit codes, CommandLine, RunService
namespace fs = std::filesystem;
constexpr const char* kProgram = "scdino-eval";

// The complete features directories under <run_dir>/features, sorted.
std::vector<std::string> FeatureDirs(const std::string& run_dir) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/features", ec)) {
    if (fs::exists(e.path() / "metadata.json")) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// The feature sets to evaluate: those of --features, else every complete
// one of the run (none with --follow, which extracts its own).
scdino::StatusOr<std::vector<scdino::features::FeatureSet>> FeatureSets(std::vector<std::string> dirs, bool follow,
                                                                       const std::string& run_dir) {
  if (follow && !dirs.empty()) {
    return scdino::Status::InvalidArgument("--follow evaluates the trainer's checkpoints; drop --features");
  }
  if (dirs.empty() && !follow) {
    dirs = FeatureDirs(run_dir);
    if (dirs.empty()) {
      return scdino::Status::InvalidArgument(
          "no complete features directory under " + run_dir +
          "/features; run scdino-features first (or pass --features DIR, or --follow a trainer)");
    }
  }
  std::vector<scdino::features::FeatureSet> sets;
  for (const auto& d : dirs) {
    auto set = scdino::features::ReadFeatureSet(d);
    if (!set.ok()) return set.status();
    sets.push_back(std::move(set).value());
  }
  return sets;
}

// The per-checkpoint table (when `table`) and the report, each said with
// its path on stdout.
scdino::Status WriteOutputs(scdino::jobs::CheckpointEvaluator& evaluator, bool table) {
  if (table) {
    auto path = evaluator.WriteTable();
    if (!path.ok()) return path.status();
    std::cout << "\nkNN accuracy per checkpoint: " << *path << "\n";
  }
  auto path = evaluator.WriteReport();
  if (!path.ok()) return path.status();
  std::cout << "report: " << *path << "\n";
  return scdino::Status::Ok();
}

// --follow: the raw pixels first (the baseline every checkpoint's report is
// judged against; an already complete set is kept), then each checkpoint
// the trainer has written and writes, extracted here and evaluated, the
// table and report written after each.
scdino::Status FollowTheTrainer(const scdino::run::RunConfig& config, const std::string& config_path, Service& s,
                                scdino::jobs::CheckpointEvaluator& evaluator) {
  auto stop = [&s] { return s.Stopping(); };
  auto dataset = scdino::run::IndexDataset(config);
  if (!dataset.ok()) return dataset.status();
  auto run = scdino::jobs::PrepareFeatureRun(config, std::move(dataset).value(), config_path, s.launch,
                                             *s.coordinator, stop);
  if (!run.ok()) return run.status();
  scdino::jobs::ExtractHooks hooks;
  hooks.control = &s.plane->control();
  hooks.stop_signal = StopSignalReceived;
  hooks.log = &std::cerr;
  hooks.program = kProgram;
  auto extract_and_evaluate = [&](const std::string& checkpoint) -> scdino::Status {
    auto dir = scdino::jobs::ExtractCheckpoint(config, *run, checkpoint, config.downstream.checkpoint_key,
                                               s.launch, s.device.device, hooks);
    if (!dir.ok()) return dir.status();
    auto set = scdino::features::ReadFeatureSet(*dir);
    if (!set.ok()) return set.status();
    if (auto st = evaluator.Evaluate(*set); !st.ok()) return st;
    return WriteOutputs(evaluator, /*table=*/true);
  };
  if (auto st = extract_and_evaluate(scdino::jobs::kRawPixels); !st.ok()) return st;
  return FollowCheckpoints(FollowOptionsFor(config, kProgram, stop),
                           [&](const scdino::CheckpointEntry& c) { return extract_and_evaluate(c.path); });
}

}  // namespace

int Main(int argc, char** argv) {
  InstallStopSignals(kProgram, "stopping at the next chunk of work (complete results are kept)");
  std::vector<std::string> dirs;
  bool no_attention = false, follow = false;
  CommandLine cl(kProgram,
                 "Weighted kNN, per-class metrics and plots of the features scdino-features wrote (docs/eval.md).\n"
                 "Output: <run_dir>/eval/<features name>/ (knn_results.json/.csv, per_class.csv,\n"
                 "confusion_matrix.csv/.png, pca.png, tsne.png, umap.png, embeddings.csv/.h5ad, attention/*.png)\n"
                 "and <run_dir>/eval/knn_per_checkpoint.csv when there are several or with --follow.\n" +
                     ExitCodesHelp(kProgram));
  cl.app()
      .add_option("--features", dirs,
                  "a features directory of scdino-features (repeatable); default: every complete one under "
                  "<run_dir>/features")
      ->type_name("DIR");
  cl.app().add_flag("--follow", follow,
                    "follow the run's trainer through its control API: extract and evaluate every numbered "
                    "checkpoint it has written and writes, until it ends");
  cl.app().add_flag("--no-attention", no_attention, "skip the attention maps (they need the checkpoint)");
  if (auto code = cl.Parse(argc, argv)) return *code;
  const auto settings = cl.RunSettings();
  if (!settings) return kExitBadInput;
  const auto& config = *settings;
  auto sets = FeatureSets(dirs, follow, config.run_dir());
  if (!sets.ok()) return Fail(nullptr, kProgram, sets.status());
  // One process: the evaluation does not spread over ranks.
  const ServiceSpec spec{kProgram, /*alone=*/true, nullptr, ServiceOptions{"eval", "queries", "kNN"}};
  RunService(spec, config, cl.ConfigureCpu(), [&](Service& s) -> int {
    scdino::jobs::EvaluatorOptions o;
    o.device = s.device.device;
    o.threads = s.threads;
    o.attention = !no_attention;
    AttachEvaluator(*s.plane, &o);
    o.stop_signal = StopSignalReceived;
    o.log = &std::cerr;
    o.out = &std::cout;
    scdino::jobs::CheckpointEvaluator evaluator(config, o);
    for (const auto& set : *sets) {
      if (auto st = evaluator.Evaluate(set); !st.ok()) return s.Fail(st);
    }
    auto st = follow ? FollowTheTrainer(config, cl.config_path(), s, evaluator)
                     : WriteOutputs(evaluator, /*table=*/evaluator.rows().size() > 1);
    if (!st.ok()) return s.Fail(st);
    s.plane->Finish(scdino::RunState::kCompleted, "", kExitCompleted);
    return kExitCompleted;
  });
}

}  // namespace scdino::programs::eval_main
