// The pieces both evaluation pages draw with (eval/report.h: one run's
// page; eval/combinations_report.h: the page that compares a file's channel
// combinations): an evaluated features directory as its knn_results.json
// says, inline SVG line and bar charts, escaping, the pages' style and the
// script that counts figures that could not be loaded.
// Functions of their arguments and the files they read.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace scdino::eval::html {

std::string Escape(const std::string& s);
/// 0.5 -> "50.0%".
std::string Percent(double v);
/// j[key] when it is a number (a string), else 0 ("").
double Number(const nlohmann::json& j, const char* key);
std::string Text(const nlohmann::json& j, const char* key);

// One evaluated features directory, as its knn_results.json says.
struct Entry {
  std::string name;
  std::string error;  ///< why its results could not be read; empty when read
  bool baseline = false;  ///< the random-init features
  bool pixels = false;    ///< the raw pixels (the other baseline)
  bool complete = false;  ///< the embeddings were written (not stopped)
  int64_t epoch = -1, iteration = -1, n_train = 0, n_test = 0, best_k = 0, classes = 0;
  double knn_top1 = 0, knn_balanced = 0;
  bool linear = false, clustering = false;
  double linear_top1 = 0, linear_balanced = 0, linear_c = 0, ari = 0, nmi = 0;
  std::string linear_skipped;
  /// Every k: top-1 and balanced accuracy.
  std::vector<std::pair<double, double>> top1_by_k, balanced_by_k;
  /// At the best k: each class's precision and recall.
  struct ClassScore {
    std::string name;
    double precision = 0, recall = 0;
    int64_t support = 0;
  };
  std::vector<ClassScore> per_class;
};

/// Every <eval_dir>/<name>/knn_results.json: the baselines first (random
/// init, raw pixels), then by iteration (unknown last), then name. One that
/// cannot be read is an Entry with its error.
std::vector<Entry> ReadEntries(const std::string& eval_dir);

/// What a page draws of the entries: the complete evaluations of trained
/// checkpoints, one per iteration (the final checkpoint repeats the last
/// numbered one), and the baselines (complete ones preferred; null: none).
struct Curves {
  std::vector<Entry> trained;
  const Entry* random = nullptr;
  const Entry* pixels = nullptr;
};
Curves CurvesOf(const std::vector<Entry>& entries);

struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
};
/// A line chart as inline SVG: framed axes with round ticks, a legend below.
std::string Chart(const std::string& title, const std::string& x_label, const std::vector<Series>& series,
                  std::optional<std::pair<double, double>> y_range);

struct Bars {
  std::string name, colour;
  std::vector<double> values;  ///< one per label
};
/// Grouped horizontal bars as inline SVG: one row per label, one bar per
/// series (values in [0, 1]), the value at each bar's end, a legend below.
std::string BarChart(const std::string& title, const std::vector<std::string>& labels, const std::vector<Bars>& bars);

/// The x of a checkpoint: its epoch (what the training log counts in).
double XOf(const Entry& e);
/// A dashed line at `value` across the checkpoints' epochs.
Series Baseline(const std::string& name, const std::string& colour, double value, const std::vector<Entry>& trained);
/// An <img> with its caption.
std::string Figure(const std::string& src, const std::string& caption);

extern const char* const kStyle;
/// Sets body[data-images] and body[data-broken-images] once the page has
/// loaded, and names the broken figures in #broken.
extern const char* const kBrokenImageScript;

}  // namespace scdino::eval::html
