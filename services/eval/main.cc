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

#include "eval/checkpoint_evaluator.h"
#include "eval/eval_wiring.h"
#include "features/feature_job.h"
#include "features/feature_set.h"
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

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals(kProgram, "stopping at the next chunk of work (complete results are kept)");
  std::vector<std::string> dirs;
  bool no_attention = false, follow = false;
  CommandLine cl(kProgram,
                 "Weighted kNN, per-class metrics and plots of the features scdino-features wrote (docs/eval.md).\n"
                 "Output: <run_dir>/eval/<features name>/ (knn_results.json/.csv, per_class.csv,\n"
                 "confusion_matrix.csv/.png, pca.png, tsne.png, umap.png, embeddings.csv/.h5ad, attention/*.png)\n"
                 "and <run_dir>/eval/knn_per_checkpoint.csv when there are several or with --follow.\n" +
                     scdino::process::ExitCodesHelp(kProgram));
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
  if (follow && !dirs.empty()) {
    std::cerr << kProgram << ": --follow evaluates the trainer's checkpoints; drop --features\n";
    return kExitBadInput;
  }
  if (dirs.empty() && !follow) {
    dirs = FeatureDirs(config.run_dir());
    if (dirs.empty()) {
      std::cerr << kProgram << ": no complete features directory under " << config.run_dir()
                << "/features; run scdino-features first (or pass --features DIR, or --follow a trainer)\n";
      return kExitBadInput;
    }
  }
  const int n_threads = cl.ConfigureCpu();
  std::vector<scdino::features::FeatureSet> sets;
  for (const auto& d : dirs) {
    auto s = scdino::features::ReadFeatureSet(d);
    if (!s.ok()) return Fail(nullptr, kProgram, s.status());
    sets.push_back(std::move(s).value());
  }
  // Every part with threads lives in the work's scope and is stopped as it
  // ends (the control API and metrics, then the rendezvous); then the
  // process ends without library destructors (process/shutdown.h).
  const int code = GuardMain(kProgram, [&]() -> int {
    scdino::run::LaunchInfo single;
    auto device = scdino::run::PickDevice(config, single);
    if (!device.ok()) return Fail(nullptr, kProgram, device.status());
    std::cerr << kProgram << ": run " << config.run_dir() << ", device " << device->device << " (" << device->why << "), " << n_threads
              << " CPU threads\n";
    // Temporaries of evaluations that were killed go; a live writer's stay.
    if (auto s = scdino::run::PrepareRunDir(config); !s.ok()) return Fail(nullptr, kProgram, s);
    auto plane = ServicePlane::Start(config, single, {"eval", "queries", "kNN"});
    if (!plane.ok()) return Fail(nullptr, kProgram, plane.status());
    ServicePlane* p = plane->get();
    auto stop = [p] { return StopSignalReceived() || p->control().Requests().stop; };

    scdino::eval::EvaluatorOptions o;
    o.device = device->device;
    o.threads = n_threads;
    o.attention = !no_attention;
    AttachEvaluator(*p, &o);
    o.stop_signal = StopSignalReceived;
    o.log = &std::cerr;
    o.out = &std::cout;
    scdino::eval::CheckpointEvaluator evaluator(config, o);
    auto write_table = [&]() -> scdino::Status {
      auto path = evaluator.WriteTable();
      if (!path.ok()) return path.status();
      std::cout << "\nkNN accuracy per checkpoint: " << *path << "\n";
      return scdino::Status::Ok();
    };
    auto write_report = [&]() -> scdino::Status {
      auto path = evaluator.WriteReport();
      if (!path.ok()) return path.status();
      std::cout << "report: " << *path << "\n";
      return scdino::Status::Ok();
    };

    for (const auto& set : sets) {
      if (auto s = evaluator.Evaluate(set); !s.ok()) return Fail(p, kProgram, s);
    }
    if (follow) {
      auto coordinator = scdino::run::Coordinator::Single();
      auto dataset = scdino::run::IndexDataset(config);
      if (!dataset.ok()) return Fail(p, kProgram, dataset.status());
      auto run = scdino::features::PrepareFeatureRun(config, std::move(dataset).value(), cl.config_path(), single,
                                                     *coordinator, stop);
      if (!run.ok()) return Fail(p, kProgram, run.status());
      const std::string key = config.downstream.checkpoint_key;
      FollowOptions fo;
      fo.run_dir = config.run_dir();
      fo.token_file = config.scdino.control.token_file;
      fo.should_stop = stop;
      fo.log = &std::cerr;
      fo.program = kProgram;
      scdino::features::ExtractHooks hooks;
      hooks.control = &p->control();
      hooks.stop_signal = StopSignalReceived;
      hooks.log = &std::cerr;
      hooks.program = kProgram;
      // Extracts and evaluates one checkpoint, or a baseline.
      auto extract_and_evaluate = [&](const std::string& checkpoint) -> scdino::Status {
        auto dir = scdino::features::ExtractCheckpoint(config, *run, checkpoint, key, single, device->device, hooks);
        if (!dir.ok()) return dir.status();
        auto set = scdino::features::ReadFeatureSet(*dir);
        if (!set.ok()) return set.status();
        if (auto st = evaluator.Evaluate(*set); !st.ok()) return st;
        if (auto st = write_table(); !st.ok()) return st;
        return write_report();
      };
      // The raw pixels first: the baseline every checkpoint's report is
      // judged against (no model; an already complete set is kept).
      if (auto s = extract_and_evaluate(scdino::features::kRawPixels); !s.ok()) return Fail(p, kProgram, s);
      auto s = FollowCheckpoints(
          fo, [&](const scdino::CheckpointEntry& c) -> scdino::Status { return extract_and_evaluate(c.path); });
      if (!s.ok()) return Fail(p, kProgram, s);
    } else {
      if (evaluator.rows().size() > 1) {
        if (auto s = write_table(); !s.ok()) return Fail(p, kProgram, s);
      }
      if (auto s = write_report(); !s.ok()) return Fail(p, kProgram, s);
    }
    p->Finish(scdino::RunState::kCompleted);
    return kExitCompleted;
  });
  EndProcess(kProgram, code);
}
