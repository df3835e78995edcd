// The page that compares the channel combinations of one file, each trained
// as a run of its own in <output_dir>/<name_of_run>/<combination folder>
// (the config library's RunConfig::combination_dir): <output_dir>/<name_of_run>/
// report.html, rewritten after each evaluation of any combination, from the
// files already written (each folder's eval/*/knn_results.json and
// endpoints/trainer.ended.json). It shows
//   - kNN top-1 (best k) against the epoch, one curve per combination;
//   - each combination's latest evaluated checkpoint beside the random-init
//     and raw-pixel baselines of its channels, as bars, and a table with
//     its training's state and a link to its own report (eval/report.html);
//   - each class's F1 (kNN at the best k) per combination.
// A combination with nothing to show yet is listed with why (not started,
// its training FAILED with the error it ended on, no evaluation yet).
// Functions of the files they read; concurrent writers each write a
// complete page (the last one wins).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

struct CombinationRun {
  std::string folder;    ///< <dino_vit_name>_channel_<names>
  std::string channels;  ///< its channels' names, "DAPI, BF"
};

struct CombinationsReportOptions {
  std::string name;     ///< meta.name_of_run
  std::string top_dir;  ///< <output_dir>/<name_of_run>, holding each combination's folder
  std::vector<CombinationRun> combinations;  ///< in the file's order
};

/// The page for the combinations' current files (pure of the clock).
std::string CombinationsReportHtml(const CombinationsReportOptions& options);

/// Writes CombinationsReportHtml to <top_dir>/report.html (atomically) and
/// returns its path.
StatusOr<std::string> WriteCombinationsReport(const CombinationsReportOptions& options);

}  // namespace scdino::eval
