#include "eval/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/files.h"
#include "data/stats.h"
#include "run/learning_verdict.h"
#include "eval/drawing.h"
#include "eval/report_html.h"

namespace scdino::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using html::BarChart, html::Bars, html::Baseline, html::Chart, html::Entry, html::Escape, html::Figure,
    html::kBrokenImageScript, html::kStyle, html::Percent, html::Series, html::Text, html::XOf;

// The training log's last record of each epoch (a resumed run repeats some).
std::map<int64_t, json> ReadTrainingLog(const std::string& path) {
  std::map<int64_t, json> epochs;
  auto text = ReadFile(path);
  if (!text.ok()) return epochs;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer()) epochs[j["epoch"].get<int64_t>()] = j;
  }
  return epochs;
}

// Each channel's intensity histogram (data/stats.h: equal bins over the
// prepared [0, 1]) as a small inline SVG, on a log scale: most pixels of a
// cell image are background, which a linear scale would show alone.
std::string Histogram(const std::string& title, const std::vector<int64_t>& counts) {
  int64_t top = 0, total = 0;
  for (int64_t c : counts) top = std::max(top, c), total += c;
  if (counts.empty() || top == 0) return "";
  const double W = 270, H = 160, left = 10, right = 10, plot_top = 30, bottom = 34;
  const double span = W - left - right, bar = span / static_cast<double>(counts.size());
  const double log_top = std::log10(1.0 + static_cast<double>(top));
  std::ostringstream o;
  o << "<figure class=\"chart\"><svg viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W << "\" height=\"" << H
    << "\" role=\"img\" aria-label=\"" << Escape(title) << "\"><text x=\"" << W / 2
    << "\" y=\"18\" text-anchor=\"middle\" class=\"title\">" << Escape(title) << "</text><rect x=\"" << left
    << "\" y=\"" << plot_top << "\" width=\"" << span << "\" height=\"" << H - plot_top - bottom << "\" class=\"frame\"/>";
  for (size_t b = 0; b < counts.size(); ++b) {
    const double h = std::log10(1.0 + static_cast<double>(counts[b])) / log_top * (H - plot_top - bottom);
    o << "<rect x=\"" << left + bar * static_cast<double>(b) << "\" y=\"" << H - bottom - h << "\" width=\""
      << std::max(1.0, bar - 1) << "\" height=\"" << h << "\" fill=\"#1f77b4\"><title>"
      << FormatFixed(static_cast<double>(b) / static_cast<double>(counts.size()), 3) << "-"
      << FormatFixed(static_cast<double>(b + 1) / static_cast<double>(counts.size()), 3) << ": " << counts[b]
      << " pixels (" << Percent(static_cast<double>(counts[b]) / static_cast<double>(total)) << ")</title></rect>";
  }
  o << "<text x=\"" << left << "\" y=\"" << H - bottom + 14 << "\">0</text><text x=\"" << W - right << "\" y=\""
    << H - bottom + 14 << "\" text-anchor=\"end\">1</text><text x=\"" << W / 2 << "\" y=\"" << H - 6
    << "\" text-anchor=\"middle\">intensity after min-max, pixels (log)</text></svg></figure>\n";
  return o.str();
}

std::string Base64(const std::string& bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kDigits[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[v & 63] : '=';
  }
  return out;
}

// The data the run trained on: the channels' histograms from the statistics
// and the recipe's crops of one image (data/crop_preview.h), when the files
// are there.
std::string DataSection(const ReportOptions& options) {
  const std::string stats_path =
      options.stats_path.empty() ? options.run_dir + "/channel_stats.json" : options.stats_path;
  std::ostringstream charts;
  std::string stats_note;
  std::error_code ec;
  if (fs::exists(stats_path, ec)) {
    const std::string file = fs::path(stats_path).filename().string();
    auto stats = data::ReadStats(stats_path);
    if (!stats.ok()) {
      stats_note = "No histograms: " + stats.status().message();
    } else if (stats->histogram.empty()) {
      stats_note = file + " has no histograms (written by an older scdino).";
    } else {
      for (size_t c = 0; c < stats->histogram.size(); ++c) {
        const int64_t index = c < stats->channels.size() ? stats->channels[c] : static_cast<int64_t>(c);
        const auto& shown = options.channels;
        if (!shown.empty() && std::find(shown.begin(), shown.end(), index) == shown.end()) continue;
        const auto name = options.channel_names.find(index);
        charts << Histogram(name == options.channel_names.end() ? "channel " + std::to_string(index) : name->second,
                            stats->histogram[c]);
      }
      stats_note = "Intensities of " + std::to_string(stats->images) + " training images after min-max (from " +
                   file + ").";
    }
  }
  std::string preview;
  if (auto png = ReadFile(options.run_dir + "/crops_preview.png"); png.ok()) {
    preview = "<figure><img src=\"data:image/png;base64," + Base64(*png) +
              "\" alt=\"crops of one training image\" style=\"max-width:100%\"><figcaption>One training image "
              "(first column) and the crops the recipe makes of it in epoch 0: the 2 global crops, then the "
              "local ones, at their own sizes; one row per channel (crops_preview.png, written by "
              "scdino-trainer).</figcaption></figure>\n";
  }
  if (charts.str().empty() && stats_note.empty() && preview.empty()) return "";
  std::ostringstream o;
  o << "<h2>Data</h2>\n";
  if (!stats_note.empty()) o << "<p class=\"note\">" << Escape(stats_note) << "</p>\n";
  if (!charts.str().empty()) o << "<div class=\"charts\">\n" << charts.str() << "</div>\n";
  o << preview;
  return o.str();
}

// The verdict of the newest checkpoint against the baselines there are
// (run/learning_verdict.h), by kNN at each one's best k, and the linear
// probes beside it.
std::string LearnedParagraph(const Entry& last, const Entry* random, const Entry* pixels, double margin) {
  std::ostringstream o;
  if (last.classes == 1) {
    o << "<p class=\"note\">Did it learn? Not judged: the data set has one class (no labels to judge the "
         "features or the baselines by).</p>\n";
    return o.str();
  }
  if (!random) {
    o << "<p class=\"note\">Did it learn? Not judged without the random-init baseline.</p>\n";
    return o.str();
  }
  LearningScores s;
  s.trained = last.knn_top1;
  s.random = random->knn_top1;
  s.pixels = pixels ? pixels->knn_top1 : -1.0;
  s.margin = margin;
  s.test_images = last.n_test;
  s.k = last.best_k;
  const LearningVerdict v = JudgeLearning(s);
  o << "<p class=\"verdict " << v.name << "\">Did it learn? " << Escape(last.name) << ": " << Escape(v.line)
    << " (kNN at each one's best k).";
  if (last.linear && random->linear) {
    o << " Linear probe top-1: " << Percent(last.linear_top1) << ", random init " << Percent(random->linear_top1);
    if (pixels && pixels->linear) o << ", raw pixels " << Percent(pixels->linear_top1);
    o << ".";
  }
  o << "</p>\n";
  return o.str();
}

}  // namespace

std::string RunReportHtml(const ReportOptions& options) {
  const std::string eval_dir = options.run_dir + "/eval";
  const auto entries = html::ReadEntries(eval_dir);
  const auto log = ReadTrainingLog(options.run_dir + "/log.jsonl");
  const html::Curves curves = html::CurvesOf(entries);
  const std::vector<Entry>& trained = curves.trained;
  const Entry *baseline = curves.random, *pixels = curves.pixels;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>scdino evaluation: "
    << Escape(options.run_name) << "</title><style>" << kStyle << "</style></head>\n<body data-images=\"0\" "
    << "data-broken-images=\"unknown\">\n<h1>scdino evaluation: " << Escape(options.run_name) << "</h1>\n"
    << "<p class=\"note\">Run directory <code>" << Escape(options.run_dir) << "</code>; scdino " << SCDINO_VERSION
    << ". Written by scdino-eval after each evaluated checkpoint from the files under <code>eval/</code> and the "
       "training log (docs/eval.md).</p>\n<p id=\"broken\" hidden></p>\n";
  if (entries.empty()) {
    o << "<p>No evaluated features yet: run scdino-features, then scdino-eval.</p>\n";
  }

  // Curves over checkpoints, the random-init features and the raw pixels as
  // the baselines.
  if (!trained.empty()) {
    o << "<h2>Over checkpoints</h2>\n<div class=\"charts\">\n";
    Series knn{"kNN top-1 (best k)", "#1f77b4", {}}, linear{"linear probe top-1", "#d62728", {}};
    Series ari{"k-means ARI", "#2ca02c", {}}, nmi{"k-means NMI", "#9467bd", {}};
    for (const auto& e : trained) {
      knn.points.emplace_back(XOf(e), e.knn_top1);
      if (e.linear) linear.points.emplace_back(XOf(e), e.linear_top1);
      if (e.clustering) ari.points.emplace_back(XOf(e), e.ari), nmi.points.emplace_back(XOf(e), e.nmi);
    }
    std::vector<Series> accuracy{knn, linear}, clusters{ari, nmi};
    if (baseline) {
      accuracy.push_back(Baseline("kNN, random init", "#1f77b4", baseline->knn_top1, trained));
      if (baseline->linear) accuracy.push_back(Baseline("linear, random init", "#d62728", baseline->linear_top1, trained));
      if (baseline->clustering) {
        clusters.push_back(Baseline("ARI, random init", "#2ca02c", baseline->ari, trained));
        clusters.push_back(Baseline("NMI, random init", "#9467bd", baseline->nmi, trained));
      }
    }
    if (pixels) {
      accuracy.push_back(Baseline("kNN, raw pixels", "#7f7f7f", pixels->knn_top1, trained));
      if (pixels->linear) accuracy.push_back(Baseline("linear, raw pixels", "#bcbd22", pixels->linear_top1, trained));
    }
    o << Chart("Accuracy on the test cells", "epoch", accuracy, std::make_pair(0.0, 1.0));
    if (!ari.points.empty()) o << Chart("Clusters against the classes", "epoch", clusters, std::make_pair(0.0, 1.0));
    o << "</div>\n";
    if (!baseline || !pixels) {
      const char* missing = !baseline && !pixels ? "random-init or raw-pixel baselines"
                            : !baseline          ? "random-init baseline"
                                                 : "raw-pixel baseline";
      o << "<p class=\"note\">No " << missing << ": <code>scdino-features" << (!baseline ? " --random-init" : "")
        << (!pixels ? " --raw-pixels" : "") << "</code> then scdino-eval draws "
        << (!baseline && !pixels ? "them" : "it") << ".</p>\n";
    }
    o << LearnedParagraph(trained.back(), baseline, pixels, options.learning_margin);
  }

  // One row per evaluated features directory.
  if (!entries.empty()) {
    o << "<h2>Every evaluated checkpoint</h2>\n<table><tr><th>features</th><th>epoch</th><th>iteration</th>"
         "<th>test cells</th><th>kNN top-1</th><th>kNN balanced</th><th>best k</th><th>linear top-1</th>"
         "<th>linear balanced</th><th>C</th><th>ARI</th><th>NMI</th><th>state</th></tr>\n";
    for (const auto& e : entries) {
      if (!e.error.empty()) {
        o << "<tr><td>" << Escape(e.name) << "</td><td colspan=\"12\">" << Escape(e.error) << "</td></tr>\n";
        continue;
      }
      auto opt = [](bool done, double v, const std::string& why) {
        return done ? Percent(v) : "<span title=\"" + Escape(why) + "\">-</span>";
      };
      o << "<tr" << (e.baseline || e.pixels ? " class=\"baseline\"" : "") << "><td>" << Escape(e.name) << "</td><td>"
        << (e.epoch >= 0 ? std::to_string(e.epoch) : "") << "</td><td>"
        << (e.iteration >= 0 ? std::to_string(e.iteration) : "") << "</td><td>" << e.n_test << "</td><td>"
        << Percent(e.knn_top1) << "</td><td>" << Percent(e.knn_balanced) << "</td><td>" << e.best_k << "</td><td>"
        << opt(e.linear, e.linear_top1, e.linear_skipped) << "</td><td>"
        << opt(e.linear, e.linear_balanced, e.linear_skipped) << "</td><td>"
        << (e.linear ? FormatFixed(e.linear_c, e.linear_c < 1 ? 2 : 0) : "") << "</td><td>"
        << (e.clustering ? FormatFixed(e.ari, 3) : "-") << "</td><td>" << (e.clustering ? FormatFixed(e.nmi, 3) : "-")
        << "</td><td>" << (e.complete ? "complete" : "stopped") << "</td></tr>\n";
    }
    o << "</table>\n";
  }

  // The latest checkpoint's figures: the last complete evaluation, else the last.
  const Entry* latest = nullptr;
  for (const auto& e : entries) {
    if (e.error.empty() && !e.baseline && !e.pixels && (!latest || e.complete || !latest->complete)) latest = &e;
  }
  if (!latest && baseline) latest = baseline;
  if (latest) {
    const fs::path dir = fs::path(eval_dir) / latest->name;
    o << "<h2>" << Escape(latest->name) << (latest->epoch >= 0 ? ", epoch " + std::to_string(latest->epoch) : "")
      << "</h2>\n<div class=\"figures\">\n";
    std::error_code ec;
    const std::vector<std::pair<std::string, std::string>> figures = {
        {"umap.png", "UMAP of the test cells, by class"},
        {"umap_kmeans.png", "the same UMAP, by k-means cluster"},
        {"tsne_kmeans.png", "t-SNE, by k-means cluster"},
        {"pca_kmeans.png", "PCA, by k-means cluster"},
        {"confusion_matrix.png", "kNN confusion matrix"},
        {"linear_probe_confusion_matrix.png", "linear-probe confusion matrix"}};
    // Accuracy against k, and each class's precision and recall at the best k.
    if (latest->error.empty() && latest->top1_by_k.size() > 1) {
      o << Chart("kNN accuracy against k", "k",
                 {Series{"top-1", "#1f77b4", latest->top1_by_k}, Series{"balanced", "#ff7f0e", latest->balanced_by_k}},
                 std::make_pair(0.0, 1.0));
    }
    if (latest->error.empty() && !latest->per_class.empty()) {
      std::vector<std::string> labels;
      Bars precision{"precision", "#1f77b4", {}}, recall{"recall", "#ff7f0e", {}};
      for (const auto& c : latest->per_class) {
        labels.push_back(c.name + " (" + std::to_string(c.support) + ")");
        precision.values.push_back(c.precision);
        recall.values.push_back(c.recall);
      }
      o << BarChart("kNN per class at k = " + std::to_string(latest->best_k) + " (test cells)", labels,
                    {precision, recall});
    }
    int shown = 0;
    for (const auto& [file, caption] : figures) {
      if (fs::exists(dir / file, ec)) o << Figure(latest->name + "/" + file, caption), ++shown;
    }
    std::vector<std::string> attention;
    for (fs::directory_iterator it(dir / "attention", ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".png") attention.push_back(it->path().filename().string());
    }
    std::sort(attention.begin(), attention.end());
    for (size_t i = 0; i < attention.size() && i < 4; ++i) {
      o << Figure(latest->name + "/attention/" + attention[i], "attention, " + attention[i]), ++shown;
    }
    o << "</div>\n";
    if (shown == 0) o << "<p class=\"note\">No figures in " << Escape(dir.string()) << " (the evaluation was stopped).</p>\n";
  }

  // DINO's health signals, per epoch.
  if (!log.empty()) {
    Series loss{"DINO loss", "#1f77b4", {}}, ratio{"teacher entropy ratio", "#ff7f0e", {}};
    Series cls{"CLS std", "#2ca02c", {}}, kl{"student-teacher KL", "#8c564b", {}};
    const std::pair<const char*, Series*> signals[] = {
        {"loss", &loss}, {"teacher_entropy_ratio", &ratio}, {"backbone_cls_std", &cls}, {"student_teacher_kl", &kl}};
    std::string collapsed;  // "epoch E: verdict; ..."
    for (const auto& [epoch, j] : log) {
      for (const auto& [key, series] : signals) {
        if (j.contains(key) && j[key].is_number()) series->points.emplace_back(epoch, j[key].get<double>());
      }
      const std::string verdict = Text(j, "collapse");
      if (!verdict.empty() && verdict != "healthy") {
        collapsed += (collapsed.empty() ? "" : "; ") + ("epoch " + std::to_string(epoch) + ": " + verdict);
      }
    }
    o << "<h2>Training health</h2>\n<p class=\"note\">From <code>log.jsonl</code>, " << log.size()
      << " epochs (docs/training.md explains each signal). "
      << (collapsed.empty() ? std::string("No epoch was judged collapsed.") : "Judged collapsed: " + Escape(collapsed) + ".")
      << "</p>\n<div class=\"charts\">\n"
      << Chart("Loss", "epoch", {loss}, std::nullopt)
      << Chart("Teacher entropy / ln(out_dim) (near 1: the teacher says nothing)", "epoch", {ratio}, std::make_pair(0.0, 1.0))
      << Chart("Std of the normalised CLS (near 0: every cell alike)", "epoch", {cls}, std::nullopt)
      << Chart("Student-teacher KL", "epoch", {kl}, std::nullopt) << "</div>\n";
  }
  o << DataSection(options) << kBrokenImageScript << "</body></html>\n";
  return o.str();
}

StatusOr<std::string> WriteRunReport(const ReportOptions& options) {
  const std::string path = options.run_dir + "/eval/report.html";
  if (auto s = MakeDirs(options.run_dir + "/eval"); !s.ok()) return s;
  if (auto s = WriteFileAtomic(path, RunReportHtml(options)); !s.ok()) return s;
  return path;
}

}  // namespace scdino::eval
