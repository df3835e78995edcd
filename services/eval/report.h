// The evaluation report a person reads: <run_dir>/eval/report.html, one
// page per run, rewritten after every evaluated checkpoint (also under
// scdino-eval --follow). It is a function of the files already written:
// every <run_dir>/eval/<name>/knn_results.json (whichever scdino-eval
// invocation wrote it) and the trainer's <run_dir>/log.jsonl. It shows
//   - kNN and linear-probe accuracy over checkpoints, ARI and NMI of k-means,
//     with the random-init features as a dashed baseline (inline SVG);
//   - one table row per evaluated features directory;
//   - the latest checkpoint's UMAP by class and by k-means cluster, both
//     confusion matrices and its attention maps (the PNGs beside it, linked
//     by relative paths, so the eval directory can be copied whole);
//   - DINO's health signals per epoch from the training log;
//   - the data: each channel's intensity histogram from the channel
//     statistics, and the trainer's crops_preview.png (embedded, so the
//     page needs nothing outside eval/).
// A figure that cannot be loaded is named on the page itself (a small
// script counts them: body[data-broken-images]).
// Functions of the files they read; one writer per run at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::eval {

struct ReportOptions {
  std::string run_name;
  std::string run_dir;  ///< holds eval/ and log.jsonl
  /// How much better than both baselines counts as learned
  /// (scdino.learning_margin; run/learning_verdict.h).
  double learning_margin = 0.0;
  /// The channel statistics with their histograms (RunConfig::stats_path);
  /// empty: <run_dir>/channel_stats.json.
  std::string stats_path;
  /// Channel index -> name (meta.channel_dict); others are "channel i".
  std::map<int64_t, std::string> channel_names;
  /// The run's channels, whose histograms are shown (a file several
  /// combinations share holds more); empty: every one the file has.
  std::vector<int64_t> channels;
};

/// The page for the run's current files (pure of the clock: no timestamp).
/// An unreadable or damaged knn_results.json is listed on the page, not an
/// error.
std::string RunReportHtml(const ReportOptions& options);

/// Writes RunReportHtml to <run_dir>/eval/report.html (atomically) and
/// returns its path.
StatusOr<std::string> WriteRunReport(const ReportOptions& options);

}  // namespace scdino::eval
