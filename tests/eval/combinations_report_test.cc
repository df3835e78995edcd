// The page that compares a file's channel combinations is a function of
// each combination's evaluation files and its training's end record: one
// kNN curve per evaluated combination, its latest checkpoint beside its
// baselines, each class's F1 per combination, and why a combination has
// nothing to show (FAILED with its error, not started, not evaluated yet).
#include "eval/combinations_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino::eval {
namespace {

using nlohmann::json;
using scdino::testing::ScratchDir;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// knn_results.json as scdino-eval writes it (the fields the page reads),
// two classes at the best k.
void Results(const std::string& dir, const std::string& key, int64_t epoch, double top1, double recall_a) {
  json j = {{"best_k", 10},
            {"n_train", 80},
            {"n_test", 20},
            {"embeddings", json::object()},
            {"metadata", {{"checkpoint", {{"key", key}, {"epoch", epoch}, {"iteration", epoch * 10}}}}},
            {"knn",
             {{{"k", 10},
               {"top1_accuracy", top1},
               {"balanced_accuracy", top1 - 0.05},
               {"per_class",
                {{{"class", "mitotic"}, {"precision", 0.5}, {"recall", recall_a}, {"support", 10}},
                 {{"class", "interphase"}, {"precision", 1.0}, {"recall", 1.0}, {"support", 10}}}}}}}};
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/knn_results.json", j.dump()).ok());
}

TEST(CombinationsReport, OneCurvePerCombinationBaselinesF1AndWhyOthersHaveNone) {
  ScratchDir s;
  const std::string top = s.file("pbmc");
  Results(top + "/vit_channel_DAPI_BF/eval/random_init", "random", -1, 0.3, 0.5);
  Results(top + "/vit_channel_DAPI_BF/eval/raw_pixels", "raw_pixels", -1, 0.4, 0.5);
  Results(top + "/vit_channel_DAPI_BF/eval/checkpoint0001", "teacher", 1, 0.6, 0.5);
  Results(top + "/vit_channel_DAPI_BF/eval/checkpoint0002", "teacher", 2, 0.8, 0.5);
  Results(top + "/vit_channel_DAPI/eval/random_init", "random", -1, 0.2, 0.5);
  Results(top + "/vit_channel_DAPI/eval/raw_pixels", "raw_pixels", -1, 0.35, 0.5);
  Results(top + "/vit_channel_DAPI/eval/checkpoint0002", "teacher", 2, 0.55, 0.0);
  ASSERT_TRUE(MakeDirs(top + "/vit_channel_BF/endpoints").ok());
  ASSERT_TRUE(WriteFileAtomic(top + "/vit_channel_BF/endpoints/trainer.ended.json",
                              R"({"service": "trainer", "state": "FAILED", "error": "out of <memory>",
                                  "slurm_job_id": "41_2", "exit_code": 1})")
                  .ok());
  const std::string html = CombinationsReportHtml(
      {"pbmc", top,
       {{"vit_channel_DAPI_BF", "DAPI, BF"}, {"vit_channel_DAPI", "DAPI"}, {"vit_channel_BF", "BF"},
        {"vit_channel_CD3", "CD3"}}});
  // One kNN curve per evaluated combination, named by its folder.
  EXPECT_EQ(Count(html, "<polyline"), 2u) << html;
  EXPECT_NE(html.find("kNN top-1 (best k) on the test cells"), std::string::npos);
  EXPECT_NE(html.find("</span>vit_channel_DAPI_BF</span>"), std::string::npos);
  // The latest checkpoints beside both baselines, in the table too.
  EXPECT_NE(html.find("Latest checkpoint beside the baselines of its channels"), std::string::npos);
  EXPECT_NE(html.find("</span>random init</span>"), std::string::npos);
  EXPECT_NE(html.find("</span>raw pixels</span>"), std::string::npos);
  EXPECT_NE(html.find("<td>vit_channel_DAPI_BF</td><td>DAPI, BF</td><td>started, no checkpoint yet</td><td>2</td>"
                      "<td>2</td><td>80.0%</td><td>75.0%</td><td>30.0%</td><td>40.0%</td>"
                      "<td><a href=\"vit_channel_DAPI_BF/eval/report.html\">"),
            std::string::npos)
      << html;
  // A failed training says so with its exit code, error (escaped) and job; one
  // not started, too.
  EXPECT_NE(html.find("<tr class=\"failed\"><td>vit_channel_BF</td><td>BF</td><td>FAILED (exit 1, Slurm job 41_2): out of "
                      "&lt;memory&gt;</td><td>0</td><td>-</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td>vit_channel_CD3</td><td>CD3</td><td>not started</td>"), std::string::npos) << html;
  // F1 per class per combination: 2PR/(P+R) at the best k.
  EXPECT_NE(html.find("<tr><td>mitotic</td><td>0.500</td><td>0.000</td></tr>"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr><td>interphase</td><td>1.000</td><td>1.000</td></tr>"), std::string::npos) << html;
}

TEST(CombinationsReport, NothingEvaluatedYetSaysSoAndIsWrittenAtTheTop) {
  ScratchDir s;
  const std::string top = s.file("run");
  ASSERT_TRUE(MakeDirs(top + "/vit_channel_0").ok());
  auto path = WriteCombinationsReport({"run", top, {{"vit_channel_0", "0"}, {"vit_channel_1", "1"}}});
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, top + "/report.html");
  const std::string html = *ReadFile(*path);
  EXPECT_NE(html.find("No combination has an evaluated checkpoint yet"), std::string::npos);
  EXPECT_EQ(html.find("<polyline"), std::string::npos);
  EXPECT_NE(html.find("<td>vit_channel_0</td><td>0</td><td>started, no checkpoint yet</td>"), std::string::npos);
  EXPECT_NE(html.find("no evaluation yet"), std::string::npos);
  // An end record past its bound is named as unreadable, never read whole.
  ASSERT_TRUE(MakeDirs(top + "/vit_channel_1/endpoints").ok());
  ASSERT_TRUE(WriteFileAtomic(top + "/vit_channel_1/endpoints/trainer.ended.json", std::string(1 << 17, ' ')).ok());
  const std::string hostile = CombinationsReportHtml({"run", top, {{"vit_channel_1", "1"}}});
  EXPECT_NE(hostile.find("<td>vit_channel_1</td><td>1</td><td>unknown: "), std::string::npos) << hostile;
  EXPECT_NE(hostile.find("the training&#39;s end record"), std::string::npos) << hostile;
}

}  // namespace
}  // namespace scdino::eval
