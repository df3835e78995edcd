// RunEvaluation on a small feature set: a stop that arrives after the kNN
// (during the linear probe) still leaves the kNN results written.
#include "eval/evaluation.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <sstream>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino::eval {
namespace {

using scdino::testing::ScratchDir;

features::FeatureSet ThreeClasses(const std::string& dir) {
  torch::manual_seed(2);
  features::FeatureSet set;
  set.dir = dir;
  set.classes = {"a", "b", "c"};
  auto centres = torch::randn({3, 8}) * 3;
  auto y = torch::arange(3).repeat_interleave(30);
  set.features = torch::nn::functional::normalize(centres.index_select(0, y) + torch::randn({90, 8}),
                                                  torch::nn::functional::NormalizeFuncOptions().dim(1));
  for (int64_t i = 0; i < 90; ++i) {
    set.rows.push_back({"/cells/" + std::to_string(i) + ".tif", set.classes[static_cast<size_t>(i / 30)], i / 30,
                        i % 5 == 0 ? data::Split::kTest : data::Split::kTrain});
  }
  set.metadata_json = "{}";
  return set;
}

TEST(RunEvaluation, AStopDuringTheProbeKeepsTheKnnResults) {
  ScratchDir s;
  auto set = ThreeClasses(s.file("features/checkpoint"));
  EvalOptions o;
  o.out_dir = s.file("eval/checkpoint");
  o.ks = {5, 10};
  std::atomic<bool> knn_done{false};
  std::atomic<int> asked_since{0};
  o.on_progress = [&](int64_t done, int64_t total) { knn_done = done == total; };
  // Asked for right after the kNN's last chunk (which still completes).
  o.stop_signal = [&] { return knn_done && ++asked_since > 1; };
  auto r = RunEvaluation(set, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->completed);
  EXPECT_EQ(r->scores.size(), 2u);
  EXPECT_FALSE(r->linear.done);
  EXPECT_EQ(r->linear.skipped, "stopped before the linear probe ended");
  EXPECT_EQ(r->clustering.skipped, "stopped before k-means");
  for (const char* f : {"knn_results.json", "knn_results.csv", "per_class.csv", "confusion_matrix.csv",
                        "confusion_matrix.png"}) {
    EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/" + f)) << f;
  }
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/umap.png"));
  const auto j = nlohmann::json::parse(*ReadFile(o.out_dir + "/knn_results.json"));
  EXPECT_EQ(j["linear_probe"]["skipped"], "stopped before the linear probe ended");
  EXPECT_FALSE(j.contains("embeddings"));  // what the report calls stopped
}

TEST(RunEvaluation, WithoutAStopEveryPartIsDone) {
  ScratchDir s;
  auto set = ThreeClasses(s.file("features/checkpoint"));
  EvalOptions o;
  o.out_dir = s.file("eval/checkpoint");
  o.ks = {5};
  o.embeddings.tsne = false;
  auto r = RunEvaluation(set, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->completed);
  EXPECT_TRUE(r->linear.done);
  EXPECT_GT(r->linear.top1, 0.9);
  EXPECT_TRUE(r->clustering.done);
  EXPECT_GT(r->clustering.ari, 0.7);
  for (const char* f : {"umap.png", "umap_kmeans.png", "linear_probe_confusion_matrix.png", "embeddings.h5ad"}) {
    EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/" + f)) << f;
  }
}

// Features of one class (a flat folder of unlabelled images): the kNN is
// written with a warning that it judges nothing, the linear probe and
// k-means are skipped with the reason (in the log and knn_results.json).
TEST(RunEvaluation, OneClassSkipsTheProbeAndClustersSayingWhy) {
  ScratchDir s;
  auto set = ThreeClasses(s.file("features/checkpoint"));
  set.classes = {"a"};
  for (auto& r : set.rows) {
    r.class_name = "a";
    r.class_index = 0;
  }
  EvalOptions o;
  o.out_dir = s.file("eval/checkpoint");
  o.ks = {5};
  o.embeddings.tsne = false;
  std::ostringstream log;
  o.log = &log;
  auto r = RunEvaluation(set, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->completed);
  ASSERT_EQ(r->scores.size(), 1u);
  EXPECT_FALSE(r->linear.done);
  EXPECT_NE(r->linear.skipped.find("class"), std::string::npos) << r->linear.skipped;
  EXPECT_NE(log.str().find("scdino-eval: linear probe skipped: " + r->linear.skipped), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("the features have one class ('a'): the kNN accuracy is 1 whatever the model learned"),
            std::string::npos)
      << log.str();
  EXPECT_FALSE(r->clustering.done);
  EXPECT_EQ(r->clustering.skipped, "the test rows have 1 class: cluster scores need at least two");
  const auto j = nlohmann::json::parse(*ReadFile(o.out_dir + "/knn_results.json"));
  EXPECT_EQ(j["linear_probe"]["skipped"], r->linear.skipped);
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/knn_results.csv"));
}

}  // namespace
}  // namespace scdino::eval
