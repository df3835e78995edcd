// scdino-stats: per-channel mean and std of a run's training images over
// fraction_for_mean_std_calc of them (seeded), written as JSON where the
// services read it (scdino.stats_file, default <run_dir>/channel_stats.json),
// with the data set's fingerprint.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"
#include "data/stats.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "launch/environment.h"
#include "plan/source.h"
#include "process/exit_codes.h"
#include "programs/mains.h"

namespace scdino::programs::stats_main {

int Main(int argc, char** argv) {
  using namespace scdino::process;
  std::string config_path, out;
  scdino::cli::App app("scdino-stats",
                       "Channel statistics of a run's training images (docs/data.md).\n" + ExitCodesHelp("scdino-stats"));
  app->add_option("--config", config_path, "the run's YAML config")->required()->type_name("FILE");
  app->add_option("--out", out, "where to write them; default: scdino.stats_file or <run_dir>/channel_stats.json")
      ->type_name("FILE");
  if (auto code = app.Parse(argc, argv)) return *code;
  auto config = scdino::run::LoadRunConfig(config_path);
  // --out: the file's scdino.stats_file, set as the file would (a JSON
  // string is YAML whatever the path holds).
  if (config.ok() && !out.empty()) {
    config = scdino::run::WithValues(*config, {{"scdino.stats_file", nlohmann::json(out).dump()}});
  }
  if (!config.ok()) {
    std::cerr << "scdino-stats: " << config.status().message() << "\n";
    return ExitCodeFor(config.status());
  }
  if (config->scdino.data_source == "synthetic") {
    std::cerr << "scdino-stats: " << config_path << ": scdino.data_source is synthetic; statistics need image files\n";
    return kExitBadInput;
  }
  scdino::run::ConfigureCpu(config->scdino.threads, config->scdino.cpu_gemm);
  const std::string path = config->stats_path();
  auto dataset = scdino::run::IndexDataset(*config);
  if (!dataset.ok()) {
    std::cerr << "scdino-stats: " << dataset.status().message() << "\n";
    return ExitCodeFor(dataset.status());
  }
  auto single = scdino::run::Coordinator::Single();
  // Computed afresh (that is what the tool is for), the old file replaced
  // under the lock a job array's combinations share.
  auto stats = scdino::run::RecomputeStats(*config, *dataset, config->image_prep(), *single);
  if (!stats.ok()) {
    std::cerr << "scdino-stats: " << stats.status().message() << "\n";
    return ExitCodeFor(stats.status());
  }
  std::cout << scdino::data::StatsToJson(*stats);
  std::cerr << "scdino-stats: " << stats->images << " images; written to " << path << "\n";
  return kExitCompleted;
}

}  // namespace scdino::programs::stats_main
