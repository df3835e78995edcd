// scdino-eval: weighted kNN, per-class metrics and plots of the features
// scdino-features wrote (docs/eval.md). Wiring only: flags, config, which
// features directories, RunEvaluation and attention maps for each, the
// per-checkpoint table, exit code.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "common/files.h"
#include "eval/evaluation.h"
#include "features/feature_set.h"
#include "run/environment.h"
#include "runtime/command_line.h"
#include "runtime/exit_codes.h"
#include "runtime/service_plane.h"
#include "runtime/signals.h"

namespace {

using namespace scdino::runtime;  // the exit codes, CommandLine
namespace fs = std::filesystem;

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-eval", "stopping after the current chunk of queries");
  std::vector<std::string> dirs;
  bool no_attention = false;
  CommandLine cl("scdino-eval",
                 "Weighted kNN, per-class metrics and plots of the features scdino-features wrote (docs/eval.md).\n"
                 "Output: <run_dir>/eval/<features name>/ (knn_results.json/.csv, per_class.csv,\n"
                 "confusion_matrix.csv/.png, pca.png, tsne.png, attention/*.png) and, for several,\n"
                 "<run_dir>/eval/knn_per_checkpoint.csv.\n"
                 "Exit codes: 0 done, 1 failed, 2 bad input, 4 stopped through the control API, 75 stopped by a signal.");
  cl.app()
      .add_option("--features", dirs,
                  "a features directory of scdino-features (repeatable); default: every complete one under "
                  "<run_dir>/features")
      ->type_name("DIR");
  cl.app().add_flag("--no-attention", no_attention, "skip the attention maps (they need the checkpoint)");
  if (auto code = cl.Parse(argc, argv)) return *code;
  const bool attention = !no_attention;
  const auto& config = cl.config();
  if (dirs.empty()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(config.run_dir() + "/features", ec)) {
      if (fs::exists(e.path() / "metadata.json")) dirs.push_back(e.path().string());
    }
    std::sort(dirs.begin(), dirs.end());
    if (dirs.empty()) {
      std::cerr << "scdino-eval: no complete features directory under " << config.run_dir()
                << "/features; run scdino-features first (or pass --features DIR)\n";
      return kExitBadInput;
    }
  }
  const int n_threads = cl.ConfigureThreads();
  std::vector<scdino::features::FeatureSet> sets;
  for (const auto& d : dirs) {
    auto s = scdino::features::ReadFeatureSet(d);
    if (!s.ok()) {
      std::cerr << "scdino-eval: " << s.status().message() << "\n";
      return ExitCodeFor(s.status());
    }
    sets.push_back(std::move(s).value());
  }
  try {
    scdino::run::LaunchInfo single;
    auto picked = scdino::run::PickDevice(config, single);
    if (!picked.ok()) {
      std::cerr << "scdino-eval: " << picked.status().message() << "\n";
      return ExitCodeFor(picked.status());
    }
    const torch::Device device = *picked;
    std::cerr << "scdino-eval: run " << config.run_dir() << ", device " << device << ", " << n_threads
              << " CPU threads\n";
    auto plane = ServicePlane::Start(config, single, {"eval", "queries"});
    if (!plane.ok()) {
      std::cerr << "scdino-eval: " << plane.status().ToString() << "\n";
      return kExitFailed;
    }
    const auto& down = config.downstream;
    std::vector<scdino::eval::CheckpointRow> table;
    for (auto& set : sets) {
      const std::string name = fs::path(set.dir).lexically_normal().filename().string();
      scdino::eval::EvalOptions eo;
      eo.out_dir = config.eval_dir(name);
      eo.ks = down.knn_n_neighbors;
      eo.temperature = down.knn_temperature;
      eo.knn_memory_bytes = config.scdino.evaluation.knn_memory_mb << 20;
      eo.device = device;
      eo.tsne_points = config.scdino.evaluation.tsne_points;
      eo.tsne_perplexity = config.scdino.evaluation.tsne_perplexity;
      eo.tsne_iterations = config.scdino.evaluation.tsne_iterations;
      eo.seed = static_cast<uint64_t>(config.meta.seed);
      eo.control = &(*plane)->control();
      eo.stop_signal = StopSignalReceived;
      eo.on_progress = [&](int64_t done, int64_t total) { (*plane)->ReportProgress(done, total); };
      eo.log = &std::cerr;
      std::cerr << "scdino-eval: " << set.dir << " -> " << eo.out_dir << "\n";
      auto r = scdino::eval::RunEvaluation(set, eo);
      if (!r.ok()) {
        std::cerr << "scdino-eval: " << r.status().message() << "\n";
        (*plane)->Finish(scdino::RunState::kFailed, r.status().ToString());
        return ExitCodeFor(r.status());
      }
      if (!r->completed) {
        (*plane)->Finish(scdino::RunState::kStopped);
        std::cerr << "scdino-eval: stopped before " << set.dir << " was done\n";
        return StopSignalReceived() ? kExitPreempted : kExitStoppedByApi;
      }
      if (attention && down.attention_images_per_class > 0) {
        auto backbone = scdino::eval::BackboneOf(set, static_cast<uint64_t>(config.meta.seed), device);
        auto prep = scdino::eval::PrepOf(set);
        if (!backbone.ok() || !prep.ok()) {
          std::cerr << "scdino-eval: no attention maps for " << set.dir << ": "
                    << (!backbone.ok() ? backbone.status() : prep.status()).message() << "\n";
        } else {
          if (down.resize_attention_image) prep->resize = down.attention_image_size;
          std::vector<std::string> channel_names;
          for (auto c : prep->image.channels) {
            auto it = config.meta.channel_dict.find(c);
            channel_names.push_back(it == config.meta.channel_dict.end() ? "channel " + std::to_string(c) : it->second);
          }
          auto maps = scdino::eval::WriteAttentionMaps(set, *backbone, *prep, channel_names,
                                                       down.attention_images_per_class, eo.out_dir);
          if (!maps.ok()) {
            std::cerr << "scdino-eval: " << maps.status().message() << "\n";
            (*plane)->Finish(scdino::RunState::kFailed, maps.status().ToString());
            return kExitFailed;
          }
          r->files.insert(r->files.end(), maps->begin(), maps->end());
        }
      }
      const auto meta = nlohmann::json::parse(set.metadata_json, nullptr, false);
      const auto ckpt = meta.is_object() && meta.contains("checkpoint") ? meta["checkpoint"] : nlohmann::json();
      auto number = [&](const char* k) {
        return ckpt.is_object() && ckpt.contains(k) && ckpt[k].is_number_integer() ? ckpt[k].get<int64_t>() : -1;
      };
      table.push_back({name, number("epoch"), number("iteration"), *r});
      std::cout << "\nkNN of " << name << " (" << r->n_test << " test vs " << r->n_train << " train, T "
                << std::defaultfloat << eo.temperature << "):\n   k   top-1   top-5  balanced  macro-F1\n";
      for (const auto& s : r->scores) {
        std::cout << std::setw(4) << s.k << std::fixed << std::setprecision(3) << std::setw(8) << s.top1
                  << std::setw(8) << s.top5 << std::setw(10) << s.report.balanced_accuracy << std::setw(10)
                  << s.report.macro_f1 << (s.k_used != s.k ? "  (k capped at " + std::to_string(s.k_used) + ")" : "")
                  << "\n";
      }
      std::cout << "results in " << eo.out_dir << "/:";
      for (const auto& f : r->files) std::cout << (f.rfind("attention/", 0) == 0 ? "" : " " + f);
      std::cout << " attention/\n";
    }
    if (table.size() > 1) {
      const std::string path = config.run_dir() + "/eval/knn_per_checkpoint.csv";
      if (auto s = scdino::WriteFileAtomic(path, scdino::eval::CheckpointTableCsv(table)); !s.ok()) {
        std::cerr << "scdino-eval: " << s.message() << "\n";
        (*plane)->Finish(scdino::RunState::kFailed, s.ToString());
        return kExitFailed;
      }
      std::cout << "\nkNN accuracy per checkpoint: " << path << "\n";
    }
    (*plane)->Finish(scdino::RunState::kCompleted);
    return kExitCompleted;
  } catch (const c10::Error& e) {
    std::cerr << "scdino-eval: " << e.what_without_backtrace() << "\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "scdino-eval: " << e.what() << "\n";
    return kExitFailed;
  }
}
