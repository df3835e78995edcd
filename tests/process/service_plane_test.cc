// A service's long stages (any ProgressLog of the process, on any thread)
// reach its control status and its metrics through the plane, as
// scdinoctl status and Prometheus read them, and nothing after it is gone.
#include "process/service_plane.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "common/progress.h"
#include "config/config.h"
#include "control/endpoint.h"
#include "launch/environment.h"
#include "process/exit_codes.h"
#include "support/scrape.h"
#include "support/test_support.h"

namespace scdino::process {
namespace {

using scdino::testing::Scrape;
using scdino::testing::Value;

// A run config with metrics on LISTEN (a free port) and no control API.
std::string MetricsOnly(const std::string& name, const std::string& dir, const std::string& listen) {
  return "meta: {name_of_run: " + name + ", output_dir: \"" + dir + "\"}\n" +
         "scdino: {data_source: synthetic, control: {enabled: false}, metrics: {listen: " + listen +
         ", port: 0, linger_seconds: 0}}\n";
}

// The "host:port" of the file_sd target a plane wrote.
std::string WrittenTarget(const run::RunConfig& config) {
  std::string target;
  for (const auto& f : std::filesystem::directory_iterator(config.file_sd_dir())) {
    target = nlohmann::json::parse(*ReadFile(f.path().string()))[0]["targets"][0];
  }
  return target;
}

TEST(ServicePlane, EveryLongStageReachesTheStatusAndTheMetrics) {
  scdino::testing::ScratchDir dir;
  auto config = run::ParseRunConfig(MetricsOnly("sp", dir.path(), "127.0.0.1"), "sp.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto plane = ServicePlane::Start(*config, run::LaunchInfo{}, {"eval", "queries", "kNN"});
  ASSERT_TRUE(plane.ok()) << plane.status().ToString();
  const std::string target = WrittenTarget(*config);
  const int port = std::stoi(target.substr(target.rfind(':') + 1));
  EXPECT_EQ(target.substr(0, target.rfind(':')), "127.0.0.1") << "the target names the address listened on";

  // A step of the evaluation, reported from a thread of its own.
  ProgressLog umap(nullptr, "scdino-eval: UMAP", "epochs");
  std::thread([&] { umap.Report(5, 200); }).join();
  RunStatus s = (*plane)->control().Snapshot();
  EXPECT_EQ(s.stage, "UMAP");
  EXPECT_EQ(s.stage_unit, "epochs");
  EXPECT_EQ(s.stage_done, 5);
  EXPECT_EQ(s.stage_total, 200);
  EXPECT_FALSE(s.stage_finished);
  std::string text = Scrape(port);
  EXPECT_DOUBLE_EQ(Value(text, "scdino_eval_stage_progress_ratio{stage=\"UMAP\"}"), 0.025) << text;
  EXPECT_EQ(Value(text, "scdino_eval_stage_running{stage=\"UMAP\"}"), 1.0) << text;
  umap.Report(200, 200);
  EXPECT_TRUE((*plane)->control().Snapshot().stage_finished);
  // The service's own work is a stage too, under the name it was given.
  (*plane)->ReportProgress(10, 40);
  s = (*plane)->control().Snapshot();
  EXPECT_EQ(s.stage, "kNN");
  EXPECT_EQ(s.stage_unit, "queries");
  EXPECT_EQ(s.items_done, 10);
  text = Scrape(port);
  EXPECT_EQ(Value(text, "scdino_eval_stage_running{stage=\"UMAP\"}"), 0.0) << text;
  EXPECT_EQ(Value(text, "scdino_eval_stage_progress_ratio{stage=\"UMAP\"}"), 1.0) << text;
  EXPECT_DOUBLE_EQ(Value(text, "scdino_eval_stage_progress_ratio{stage=\"kNN\"}"), 0.25) << text;
  // One unit per family: the units are in the status, not in a label.
  EXPECT_EQ(text.find("unit=\""), std::string::npos) << text;
  (*plane)->Finish(RunState::kCompleted);
  plane->reset();
  // A stage after the plane is gone reaches no one (and does not crash).
  ProgressLog later(nullptr, "scdino-eval: t-SNE", "iterations");
  later.Report(1, 10);
  later.Report(10, 10);
}

// A listener on every interface: Prometheus scrapes the target by the
// host's name (a specific address is named as such: the test above).
TEST(ServicePlane, AnEveryInterfaceTargetNamesTheHost) {
  scdino::testing::ScratchDir dir;
  auto config = run::ParseRunConfig(MetricsOnly("any", dir.path(), "0.0.0.0"), "any.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto plane = ServicePlane::Start(*config, run::LaunchInfo{}, {"eval", "queries", "kNN"});
  ASSERT_TRUE(plane.ok()) << plane.status().ToString();
  const std::string target = WrittenTarget(*config);
  EXPECT_EQ(target.substr(0, target.rfind(':')), ThisHostName());
  (*plane)->Finish(RunState::kCompleted);
}

// The end record a service leaves for scdinoctl and the comparison page
// says how the process ended: its state, error and exit code.
TEST(ServicePlane, TheEndRecordCarriesTheExitCode) {
  scdino::testing::ScratchDir dir;
  auto config = run::ParseRunConfig("meta: {name_of_run: ended, output_dir: \"" + dir.path() + "\"}\n"
                                    "scdino: {data_source: synthetic, control: {listen: \"127.0.0.1:0\"}, "
                                    "metrics: {enabled: false}}\n",
                                    "ended.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(run::PrepareRunDir(*config).ok());
  auto plane = ServicePlane::Start(*config, run::LaunchInfo{}, {"eval", "queries", "kNN"});
  ASSERT_TRUE(plane.ok()) << plane.status().ToString();
  const int code = Fail(plane->get(), "scdino-eval", Status::InvalidArgument("ended.yaml: no checkpoint"));
  EXPECT_EQ(code, ExitCodeFor(Status::InvalidArgument("")));
  auto ended = control::ReadEnded(config->run_dir(), "eval");
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_EQ(ended->state, "FAILED");
  EXPECT_EQ(ended->exit_code, code);
  EXPECT_EQ(ended->requeue, "never") << "bad input is never requeued (docs/exit-codes.md)";
  EXPECT_NE(ended->error.find("ended.yaml: no checkpoint"), std::string::npos) << ended->error;
  plane->reset();
  // One that ended early (no Finish) says so, and no exit code it cannot know.
  plane = ServicePlane::Start(*config, run::LaunchInfo{}, {"eval", "queries", "kNN"});
  ASSERT_TRUE(plane.ok()) << plane.status().ToString();
  plane->reset();
  ended = control::ReadEnded(config->run_dir(), "eval");
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_EQ(ended->state, "FAILED");
  EXPECT_EQ(ended->exit_code, -1);
  EXPECT_EQ(ended->requeue, "");
  EXPECT_EQ(ReadFile(control::EndedPath(config->run_dir(), "eval"))->find("exit_code"), std::string::npos);
}

}  // namespace
}  // namespace scdino::process
