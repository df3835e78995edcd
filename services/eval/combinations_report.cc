#include "eval/combinations_report.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "common/files.h"
#include "eval/report_html.h"

namespace scdino::eval {
namespace {

namespace fs = std::filesystem;
using html::Escape;
using html::Percent;

// Distinct colours for up to ten combinations (then they repeat).
const char* Colour(size_t i) {
  static const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kColours[i % 10];
}

struct Combination {
  const CombinationRun* run = nullptr;
  std::vector<html::Entry> entries;
  html::Curves curves;
  std::string state;  ///< its training's, in words
  bool failed = false;
};

// The training's state from the files its folder holds.
std::string TrainingState(const fs::path& dir, bool* failed) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "not started";
  // Read as the control API reads it: the run's own, regular, bounded.
  auto ended = ReadOwnFile((dir / "endpoints" / "trainer.ended.json").string(), "the training's end record",
                           Exposure::kNotWritableByOthers, 1 << 16);
  if (!ended.ok() && ended.status().code() != StatusCode::kNotFound) return "unknown: " + ended.status().message();
  if (ended.ok()) {
    const auto j = nlohmann::json::parse(*ended, nullptr, false);
    const std::string state = html::Text(j, "state"), error = html::Text(j, "error");
    const std::string job = html::Text(j, "slurm_job_id");
    const int code = j.is_object() && j.contains("exit_code") && j["exit_code"].is_number_integer()
                         ? j["exit_code"].get<int>()
                         : -1;
    std::string where = code >= 0 ? "exit " + std::to_string(code) : "";
    if (!job.empty()) where += (where.empty() ? "" : ", ") + std::string("Slurm job ") + job;
    if (!where.empty()) where = " (" + where + ")";
    if (state == "FAILED") {
      *failed = true;
      return "FAILED" + where + (error.empty() ? "" : ": " + error);
    }
    if (state == "STOPPED") return "stopped" + where + "; resumes when run again";
    if (state == "COMPLETED") return "completed" + where;
  }
  if (fs::exists(dir / "endpoints" / "trainer.json", ec)) return "training";
  if (fs::exists(dir / "checkpoint.safetensors", ec)) return "trained (a checkpoint, no end record)";
  return "started, no checkpoint yet";
}

std::string Table(const std::vector<Combination>& all) {
  std::ostringstream o;
  o << "<h2>Each combination</h2>\n<table><tr><th>combination</th><th>channels</th><th>training</th>"
       "<th>checkpoints evaluated</th><th>latest epoch</th><th>kNN top-1</th><th>kNN balanced</th>"
       "<th>random init</th><th>raw pixels</th><th>report</th></tr>\n";
  for (const auto& c : all) {
    const auto& t = c.curves.trained;
    auto baseline = [](const html::Entry* e) { return e ? Percent(e->knn_top1) : std::string("-"); };
    const std::string report = c.run->folder + "/eval/report.html";
    o << "<tr" << (c.failed ? " class=\"failed\"" : "") << "><td>" << Escape(c.run->folder) << "</td><td>"
      << Escape(c.run->channels) << "</td><td>" << Escape(c.state) << "</td><td>" << t.size() << "</td><td>"
      << (t.empty() ? "-" : std::to_string(t.back().epoch)) << "</td><td>"
      << (t.empty() ? "-" : Percent(t.back().knn_top1)) << "</td><td>"
      << (t.empty() ? "-" : Percent(t.back().knn_balanced)) << "</td><td>" << baseline(c.curves.random)
      << "</td><td>" << baseline(c.curves.pixels) << "</td><td>"
      << (c.entries.empty() ? "no evaluation yet" : "<a href=\"" + Escape(report) + "\">eval/report.html</a>")
      << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

// Each class's F1 at the best k of each combination's latest checkpoint.
std::string PerClass(const std::vector<Combination>& all) {
  std::vector<std::string> classes;
  std::set<std::string> seen;
  std::vector<const Combination*> shown;
  for (const auto& c : all) {
    if (c.curves.trained.empty() || c.curves.trained.back().per_class.empty()) continue;
    shown.push_back(&c);
    for (const auto& s : c.curves.trained.back().per_class) {
      if (seen.insert(s.name).second) classes.push_back(s.name);
    }
  }
  if (shown.empty()) return "";
  std::vector<html::Bars> bars;
  std::ostringstream table;
  table << "<table><tr><th>class</th>";
  for (size_t i = 0; i < shown.size(); ++i) {
    bars.push_back({shown[i]->run->folder, Colour(static_cast<size_t>(shown[i] - all.data())), {}});
    table << "<th>" << Escape(shown[i]->run->folder) << "</th>";
  }
  table << "</tr>\n";
  for (const auto& name : classes) {
    table << "<tr><td>" << Escape(name) << "</td>";
    for (size_t i = 0; i < shown.size(); ++i) {
      double f1 = 0;
      bool found = false;
      for (const auto& s : shown[i]->curves.trained.back().per_class) {
        if (s.name != name) continue;
        found = true;
        f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
      }
      bars[i].values.push_back(f1);
      table << "<td>" << (found ? FormatFixed(f1, 3) : "-") << "</td>";
    }
    table << "</tr>\n";
  }
  table << "</table>\n";
  return "<h2>Each class</h2>\n<p class=\"note\">F1 of the kNN at each combination's best k, on the test cells of "
         "its latest evaluated checkpoint.</p>\n" +
         html::BarChart("F1 per class", classes, bars) + table.str();
}

}  // namespace

std::string CombinationsReportHtml(const CombinationsReportOptions& options) {
  std::vector<Combination> all;
  for (const auto& run : options.combinations) {
    Combination c;
    c.run = &run;
    const fs::path dir = fs::path(options.top_dir) / run.folder;
    c.entries = html::ReadEntries((dir / "eval").string());
    c.curves = html::CurvesOf(c.entries);
    c.state = TrainingState(dir, &c.failed);
    all.push_back(std::move(c));
  }
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>scdino channel combinations: "
    << Escape(options.name) << "</title><style>" << html::kStyle
    << "tr.failed td{color:#b00}</style></head>\n<body data-images=\"0\" data-broken-images=\"unknown\">\n"
    << "<h1>scdino channel combinations: " << Escape(options.name) << "</h1>\n<p class=\"note\">"
    << options.combinations.size() << " combinations under <code>" << Escape(options.top_dir)
    << "</code>, each a run of its own; scdino " << SCDINO_VERSION
    << ". Rewritten by scdino-eval after each evaluation of any of them (docs/eval.md).</p>\n"
    << "<p id=\"broken\" hidden></p>\n";

  // kNN accuracy against the epoch, one curve per combination.
  std::vector<html::Series> curves;
  std::vector<std::string> labels;
  html::Bars trained{"latest checkpoint", "#1f77b4", {}}, random{"random init", "#7f7f7f", {}},
      pixels{"raw pixels", "#bcbd22", {}};
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& t = all[i].curves.trained;
    if (t.empty()) continue;
    html::Series s{all[i].run->folder, Colour(i), {}};
    for (const auto& e : t) s.points.emplace_back(html::XOf(e), e.knn_top1);
    curves.push_back(std::move(s));
    labels.push_back(all[i].run->channels);
    trained.values.push_back(t.back().knn_top1);
    random.values.push_back(all[i].curves.random ? all[i].curves.random->knn_top1 : 0.0);
    pixels.values.push_back(all[i].curves.pixels ? all[i].curves.pixels->knn_top1 : 0.0);
  }
  // A baseline drawn only where every combination shown has it (the
  // table says which lack it).
  std::vector<html::Bars> bars{trained};
  bool all_random = true, all_pixels = true;
  for (const auto& c : all) {
    if (c.curves.trained.empty()) continue;
    all_random = all_random && c.curves.random, all_pixels = all_pixels && c.curves.pixels;
  }
  if (all_random) bars.push_back(random);
  if (all_pixels) bars.push_back(pixels);
  if (curves.empty()) {
    o << "<p>No combination has an evaluated checkpoint yet: each one's evaluation (scdino-features, then "
         "scdino-eval) adds it here.</p>\n";
  } else {
    o << "<h2>Over checkpoints</h2>\n<div class=\"charts\">\n"
      << html::Chart("kNN top-1 (best k) on the test cells", "epoch", curves, std::make_pair(0.0, 1.0))
      << html::BarChart("Latest checkpoint beside the baselines of its channels (kNN top-1)", labels, bars)
      << "</div>\n";
  }
  o << Table(all) << PerClass(all) << html::kBrokenImageScript << "</body></html>\n";
  return o.str();
}

StatusOr<std::string> WriteCombinationsReport(const CombinationsReportOptions& options) {
  const std::string path = options.top_dir + "/report.html";
  if (auto s = WriteFileAtomic(path, CombinationsReportHtml(options)); !s.ok()) return s;
  return path;
}

}  // namespace scdino::eval
