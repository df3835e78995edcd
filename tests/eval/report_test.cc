// The run's report is a function of the evaluation files: the baseline
// dashed, the latest complete checkpoint's figures (only those present),
// damaged results named, the training's verdicts, names escaped.
#include "eval/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino::eval {
namespace {

using nlohmann::json;
using scdino::testing::ScratchDir;

ReportOptions Options(const std::string& name, const std::string& run_dir, double learning_margin = 0.0) {
  ReportOptions o;
  o.run_name = name;
  o.run_dir = run_dir;
  o.learning_margin = learning_margin;
  return o;
}

// knn_results.json as scdino-eval writes it (the fields the report reads).
void Results(const std::string& dir, const std::string& key, int64_t epoch, int64_t iteration, double top1,
             bool complete) {
  json j = {{"best_k", 10},
            {"n_train", 80},
            {"n_test", 20},
            {"metadata", {{"checkpoint", {{"key", key}, {"epoch", epoch}, {"iteration", iteration}}}}},
            {"knn", {{{"k", 10}, {"top1_accuracy", top1}, {"balanced_accuracy", top1 - 0.05}}}},
            {"linear_probe", {{"top1_accuracy", top1 + 0.1}, {"balanced_accuracy", top1}, {"C", 10}}},
            {"clustering", {{"adjusted_rand_index", top1 / 2}, {"normalized_mutual_information", top1 / 3}}}};
  if (complete) j["embeddings"] = json::object();
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/knn_results.json", j.dump()).ok());
}

TEST(RunReport, BaselineLatestCompleteFiguresAndHealth) {
  ScratchDir s;
  const std::string eval = s.file("run/eval");
  Results(eval + "/random_init", "random", -1, -1, 0.25, true);
  Results(eval + "/checkpoint0001", "teacher", 1, 10, 0.5, true);
  Results(eval + "/checkpoint0002", "teacher", 2, 20, 0.75, true);
  Results(eval + "/stopped<b>", "teacher", 3, 30, 0.8, false);  // stopped: no embeddings
  ASSERT_TRUE(MakeDirs(eval + "/damaged").ok());
  ASSERT_TRUE(WriteFileAtomic(eval + "/damaged/knn_results.json", "{\"knn\": ").ok());
  // Far larger than any results file (sparse: no disk used): named, not read.
  ASSERT_TRUE(MakeDirs(eval + "/huge").ok());
  ASSERT_TRUE(WriteFileAtomic(eval + "/huge/knn_results.json", "{").ok());
  std::filesystem::resize_file(eval + "/huge/knn_results.json", uintmax_t{1} << 30);
  ASSERT_TRUE(WriteFileAtomic(eval + "/checkpoint0002/umap.png", "png").ok());
  ASSERT_TRUE(MakeDirs(eval + "/checkpoint0002/attention").ok());
  ASSERT_TRUE(WriteFileAtomic(eval + "/checkpoint0002/attention/class_0_0.png", "png").ok());
  ASSERT_TRUE(WriteFileAtomic(s.file("run/log.jsonl"),
                              "{\"epoch\":0,\"loss\":5.5,\"teacher_entropy_ratio\":0.9}\n"
                              "{\"epoch\":1,\"loss\":5.0,\"teacher_entropy_ratio\":0.99,\"collapse\":\"uniform_collapse\"}\n")
                  .ok());
  const std::string html = RunReportHtml(Options("my run", s.file("run")));

  // The curves: two complete checkpoints, the random init dashed.
  EXPECT_NE(html.find("Accuracy on the test cells"), std::string::npos);
  EXPECT_NE(html.find("kNN, random init"), std::string::npos);
  EXPECT_NE(html.find("stroke-dasharray"), std::string::npos);
  // Table rows: the baseline first, then by iteration; damaged results named.
  const auto at = [&](const std::string& s) { return html.find(s); };
  ASSERT_NE(at("<td>random_init</td>"), std::string::npos);
  EXPECT_LT(at("<td>random_init</td>"), at("<td>checkpoint0001</td>"));
  EXPECT_LT(at("<td>checkpoint0001</td>"), at("<td>checkpoint0002</td>"));
  EXPECT_NE(at("<td>stopped&lt;b&gt;</td>"), std::string::npos) << "names are escaped";
  EXPECT_EQ(at("<td>stopped<b></td>"), std::string::npos);
  EXPECT_NE(at("damaged/knn_results.json: not the results of scdino-eval"), std::string::npos);
  EXPECT_NE(at("huge/knn_results.json: 1073741824 bytes, more than the 64 MiB of scdino-eval&#39;s results; not read"),
            std::string::npos);
  EXPECT_NE(at("<td>75.0%</td>"), std::string::npos);
  EXPECT_NE(at("<td>stopped</td>"), std::string::npos);
  // The figures of the latest complete checkpoint, only those that exist.
  EXPECT_NE(at("<h2>checkpoint0002, epoch 2</h2>"), std::string::npos);
  EXPECT_NE(at("src=\"checkpoint0002/umap.png\""), std::string::npos);
  EXPECT_NE(at("src=\"checkpoint0002/attention/class_0_0.png\""), std::string::npos);
  EXPECT_EQ(at("confusion_matrix.png"), std::string::npos);
  // Health: the verdicts of the log.
  EXPECT_NE(at("Judged collapsed: epoch 1: uniform_collapse."), std::string::npos);
  EXPECT_NE(at("<title>scdino evaluation: my run</title>"), std::string::npos);

  auto path = WriteRunReport(Options("my run", s.file("run")));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, eval + "/report.html");
  EXPECT_EQ(*ReadFile(*path), html);
}

// The latest checkpoint's accuracy against k and each class's precision
// and recall at the best k, from its knn_results.json; class names (any
// UTF-8, as the browser draws them) escaped.
TEST(RunReport, AccuracyAgainstKAndPerClassBars) {
  ScratchDir s;
  const std::string dir = s.file("run/eval/checkpoint0003");
  json j = {{"best_k", 20},
            {"n_train", 80},
            {"n_test", 20},
            {"metadata", {{"checkpoint", {{"key", "teacher"}, {"epoch", 3}, {"iteration", 30}}}}},
            {"embeddings", json::object()},
            {"knn",
             {{{"k", 10}, {"top1_accuracy", 0.6}, {"balanced_accuracy", 0.55}},
              {{"k", 20},
               {"top1_accuracy", 0.7},
               {"balanced_accuracy", 0.65},
               {"per_class",
                {{{"class", "\u03b3H2AX<high>"}, {"precision", 0.9}, {"recall", 0.25}, {"support", 12}},
                 {{"class", "mitotic"}, {"precision", 0.4}, {"recall", 1.0}, {"support", 8}}}}},
              {{"k", 50}, {"top1_accuracy", 0.5}, {"balanced_accuracy", 0.45}}}}};
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/knn_results.json", j.dump()).ok());
  const std::string html = RunReportHtml(Options("r", s.file("run")));
  const auto at = [&](const std::string& x) { return html.find(x); };
  ASSERT_NE(at("kNN accuracy against k"), std::string::npos) << html;
  // Three points a series, k on the x axis.
  const auto chart = html.substr(at("kNN accuracy against k"));
  const auto from = chart.find("points=\"") + 8;
  const auto points = chart.substr(from, chart.find('"', from) - from);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 3) << points;
  ASSERT_NE(at("kNN per class at k = 20 (test cells)"), std::string::npos) << html;
  EXPECT_NE(at("\u03b3H2AX&lt;high&gt; (12)"), std::string::npos) << "the class name, escaped, with its support";
  EXPECT_NE(at("mitotic (8)"), std::string::npos);
  // The bars' values, precision then recall of each class.
  const auto bars = html.substr(at("kNN per class at k = 20"));
  const auto in_bars = [&](const std::string& x) { return bars.find(x); };
  ASSERT_NE(in_bars(">0.90<"), std::string::npos) << bars;
  EXPECT_LT(in_bars(">0.90<"), in_bars(">0.25<"));
  EXPECT_LT(in_bars(">0.25<"), in_bars(">0.40<"));
  EXPECT_LT(in_bars(">0.40<"), in_bars(">1.00<"));
}

// The data section: one histogram per channel of the statistics, named by
// meta.channel_dict where it names the channel, and the trainer's crop
// preview embedded (the eval directory copied alone still shows it).
TEST(RunReport, ChannelHistogramsAndTheCropPreview) {
  ScratchDir s;
  const std::string run = s.file("run");
  Results(run + "/eval/checkpoint0001", "teacher", 1, 10, 0.6, true);
  std::vector<int64_t> background(32, 0), nuclei(32, 0);
  background[0] = 9000, background[31] = 40;
  nuclei[3] = 700, nuclei[20] = 12;
  json stats = {{"channels", {2, 0}},
                {"mean", {0.1, 0.2}},
                {"std", {0.1, 0.1}},
                {"images", 14},
                {"histogram", {{"bins", 32}, {"range", {0, 1}}, {"counts", {background, nuclei}}}}};
  ASSERT_TRUE(WriteFileAtomic(run + "/channel_stats.json", stats.dump()).ok());
  ASSERT_TRUE(WriteFileAtomic(run + "/crops_preview.png", "abcd").ok());
  ReportOptions o = Options("r", run);
  o.channel_names = {{2, "\u03b3H2AX"}, {7, "unused"}};
  const std::string html = RunReportHtml(o);
  const auto data = html.find("<h2>Data</h2>");
  ASSERT_NE(data, std::string::npos) << html;
  const std::string section = html.substr(data);
  EXPECT_NE(section.find("Intensities of 14 training images after min-max (from channel_stats.json)."),
            std::string::npos);
  const auto first = section.find("aria-label=\"\u03b3H2AX\""), second = section.find("aria-label=\"channel 0\"");
  ASSERT_NE(first, std::string::npos) << section;
  ASSERT_NE(second, std::string::npos) << section;
  EXPECT_LT(first, second) << "in the statistics' order";
  // 32 bars a channel, each with its range and count.
  const std::string one = section.substr(first, second - first);
  size_t bars = 0;
  for (size_t at = one.find("<title>"); at != std::string::npos; at = one.find("<title>", at + 1)) ++bars;
  EXPECT_EQ(bars, 32u);
  EXPECT_NE(one.find("0.000-0.031: 9000 pixels (99.6%)"), std::string::npos) << one;
  EXPECT_NE(one.find("0.969-1.000: 40 pixels (0.4%)"), std::string::npos) << one;
  EXPECT_NE(section.find("0.625-0.656: 12 pixels"), std::string::npos);
  EXPECT_NE(section.find("src=\"data:image/png;base64,YWJjZA==\""), std::string::npos) << "abcd in base64";
  // A file several combinations share: the run's own channels only.
  o.channels = {0};
  const std::string own = RunReportHtml(o);
  EXPECT_EQ(own.find("aria-label=\"\u03b3H2AX\""), std::string::npos) << "channel 2 is not this run's";
  EXPECT_NE(own.find("aria-label=\"channel 0\""), std::string::npos);
  o.channels.clear();

  // Statistics of an older version: said, not drawn; no preview: none shown.
  ASSERT_TRUE(WriteFileAtomic(run + "/channel_stats.json", R"({"channels": [0], "mean": [0.1], "std": [0.1]})").ok());
  std::filesystem::remove(run + "/crops_preview.png");
  const std::string old = RunReportHtml(o);
  EXPECT_NE(old.find("channel_stats.json has no histograms (written by an older scdino)."), std::string::npos);
  EXPECT_EQ(old.find("pixels (log)"), std::string::npos);
  EXPECT_EQ(old.find("data:image/png"), std::string::npos);

  // A damaged one: data::ReadStats's error on the page, naming the file.
  ASSERT_TRUE(WriteFileAtomic(run + "/channel_stats.json",
                              R"({"channels": [0], "mean": [0.1], "std": [0.1], "histogram": {"counts": [[1]]}})")
                  .ok());
  const std::string bad = RunReportHtml(o);
  EXPECT_NE(bad.find("No histograms: " + run + "/channel_stats.json: histogram.counts must hold 32 counts"),
            std::string::npos)
      << bad.substr(bad.find("<h2>Data</h2>"));
}

TEST(RunReport, NothingEvaluatedYetSaysWhatToRun) {
  ScratchDir s;
  const std::string html = RunReportHtml(Options("empty", s.file("none")));
  EXPECT_NE(html.find("No evaluated features yet: run scdino-features, then scdino-eval."), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("Training health"), std::string::npos);
}

// The raw pixels are the other baseline: dashed beside the random init,
// listed with it before the checkpoints, never taken for the latest
// checkpoint, and the newest checkpoint is judged against both in the
// trainer's words.
TEST(RunReport, TheRawPixelsAreTheOtherBaselineAndTheVerdictIsTheTrainers) {
  ScratchDir s;
  const std::string eval = s.file("run/eval");
  Results(eval + "/raw_pixels", "raw_pixels", -1, -1, 0.8, true);
  Results(eval + "/random_init", "random", -1, -1, 0.25, true);
  Results(eval + "/checkpoint0001", "teacher", 1, 10, 0.75, true);
  std::string html = RunReportHtml(Options("r", s.file("run")));
  const auto at = [&](const std::string& t) { return html.find(t); };
  EXPECT_NE(at("kNN, raw pixels"), std::string::npos);
  EXPECT_NE(at("linear, raw pixels"), std::string::npos);
  EXPECT_LT(at("<td>random_init</td>"), at("<td>raw_pixels</td>"));
  EXPECT_LT(at("<td>raw_pixels</td>"), at("<td>checkpoint0001</td>"));
  EXPECT_NE(at("<h2>checkpoint0001, epoch 1</h2>"), std::string::npos);
  EXPECT_EQ(at("No random-init"), std::string::npos);
  EXPECT_NE(at("Did it learn? checkpoint0001: did not learn: the trained teacher&#39;s features are no better than "
               "the raw pixels&#39;"),
            std::string::npos)
      << html.substr(html.find("Did it learn?"), 300);
  EXPECT_NE(at("Linear probe top-1: 85.0%, random init 35.0%, raw pixels 90.0%."), std::string::npos);

  Results(eval + "/checkpoint0002", "teacher", 2, 20, 0.9, true);
  html = RunReportHtml(Options("r", s.file("run"), /*learning_margin=*/0.05));
  EXPECT_NE(at("Did it learn? checkpoint0002: learned: 10-NN top-1 on 20 held-out images: the teacher 0.900, a "
               "random ViT 0.250 (+0.650), the raw pixels 0.800 (+0.100)"),
            std::string::npos);
  html = RunReportHtml(Options("r", s.file("run"), /*learning_margin=*/0.2));
  EXPECT_NE(at("did not learn: the trained teacher&#39;s features are no better than the raw pixels&#39; by more "
               "than 0.200 (scdino.learning_margin)"),
            std::string::npos);

  // One class: nothing to judge by, said as such (the probe says why too).
  json one = json::parse(*ReadFile(eval + "/checkpoint0002/knn_results.json"));
  one["classes"] = {"only"};
  ASSERT_TRUE(WriteFileAtomic(eval + "/checkpoint0002/knn_results.json", one.dump()).ok());
  html = RunReportHtml(Options("r", s.file("run")));
  EXPECT_NE(at("Did it learn? Not judged: the data set has one class"), std::string::npos);
  EXPECT_EQ(at("class=\"verdict"), std::string::npos);
}

}  // namespace
}  // namespace scdino::eval
