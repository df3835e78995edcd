// scdino-stats: per-channel mean and std of a run's training images over
// fraction_for_mean_std_calc of them (seeded), written as JSON where the
// trainer reads it (scdino.stats_file, default <run_dir>/channel_stats.json).
#include <iostream>
#include <string>

#include "data/dataset.h"
#include "data/stats.h"
#include "training/config.h"
#include "training/trainer.h"

int main(int argc, char** argv) {
  std::string config_path, out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::cerr << "usage: scdino-stats --config FILE [--out stats.json]\n";
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (config_path.empty()) {
    std::cerr << "usage: scdino-stats --config FILE [--out stats.json]\n";
    return 2;
  }
  auto config = scdino::training::LoadTrainConfig(config_path);
  if (!config.ok()) {
    std::cerr << "scdino-stats: " << config.status().message() << "\n";
    return 2;
  }
  if (config->scdino.data_source == "synthetic") {
    std::cerr << "scdino-stats: " << config_path << ": scdino.data_source is synthetic; statistics need image files\n";
    return 2;
  }
  scdino::training::ConfigureThreads(config->scdino.threads);
  if (!out.empty()) config->scdino.stats_file = out;
  const std::string path = config->stats_path();
  std::remove(path.c_str());
  auto dataset = scdino::training::IndexDataset(*config);
  if (!dataset.ok()) {
    std::cerr << "scdino-stats: " << dataset.status().message() << "\n";
    return 2;
  }
  auto stats = scdino::training::LoadOrComputeStats(*config, *dataset, config->image_prep());
  if (!stats.ok()) {
    std::cerr << "scdino-stats: " << stats.status().message() << "\n";
    return 1;
  }
  std::cout << scdino::data::StatsToJson(*stats);
  std::cerr << "scdino-stats: " << stats->images << " images; written to " << path << "\n";
  return 0;
}
