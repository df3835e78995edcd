// The exporter serves real HTTP on a free port; scraped here with a plain
// socket client as Prometheus would.
#include "metrics/exporter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "metrics/eval_metrics.h"
#include "metrics/status_metrics.h"
#include "support/scrape.h"
#include "support/test_support.h"

namespace scdino::metrics {
namespace {

using scdino::testing::ScratchDir;

using scdino::testing::Scrape;
using scdino::testing::Value;

TEST(Exporter, ServesItsMetricsAndWritesItsTargetFile) {
  ScratchDir dir;
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  o.file_sd_dir = dir.path() + "/targets";
  o.run = "pbmc/vit_channel_DAPI";  // a combination's run: name_of_run/<combination>
  o.slurm_job_id = "42";
  o.node = "127.0.0.1";
  o.rank = 1;
  std::string sd_path;
  {
    auto e = Exporter::Start(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    sd_path = (*e)->file_sd_path();
    EXPECT_EQ(sd_path, o.file_sd_dir + "/pbmc_vit_channel_DAPI_trainer_rank1_job42.json");
    auto sd = nlohmann::json::parse(*ReadFile(sd_path));
    EXPECT_EQ(sd[0]["targets"][0], "127.0.0.1:" + std::to_string((*e)->port()));
    EXPECT_EQ(sd[0]["labels"]["run"], "pbmc/vit_channel_DAPI");
    EXPECT_EQ(sd[0]["labels"]["rank"], "1");
    EXPECT_EQ(sd[0]["labels"]["service"], "trainer");
    EXPECT_EQ(sd[0]["labels"]["slurm_job_id"], "42");
    EXPECT_FALSE(sd[0]["labels"].contains("job")) << "would replace Prometheus' own job label";

    (*e)->unauthenticated().Increment();
    const std::string text = Scrape((*e)->port());
    EXPECT_NE(text.find("200 OK"), std::string::npos) << text;
    EXPECT_EQ(Value(text, "scdino_trainer_control_unauthenticated_requests_total"), 1.0) << text;
    EXPECT_NE(text.find("scdino_trainer_build_info{"), std::string::npos);
    // run, rank and the job are target labels; repeated here they would come
    // back as exported_* labels.
    EXPECT_NE(text.find("scdino_trainer_build_info{version="), std::string::npos) << text;
    EXPECT_EQ(text.find("rank=\"1\""), std::string::npos) << text;
    // Prometheus's standard process metrics, as its client libraries name them.
    EXPECT_GT(Value(text, "process_resident_memory_bytes"), 1e6) << text;
    EXPECT_GT(Value(text, "process_virtual_memory_bytes"), Value(text, "process_resident_memory_bytes")) << text;
    EXPECT_GT(Value(text, "process_cpu_seconds_total"), 0.0) << text;
    EXPECT_GE(Value(text, "process_open_fds"), 3.0) << text;
    EXPECT_GE(Value(text, "process_max_fds"), Value(text, "process_open_fds")) << text;
    const double start = Value(text, "process_start_time_seconds");
    const double now = static_cast<double>(std::time(nullptr));
    EXPECT_GT(start, now - 3600) << "the process started within the hour: " << text;
    EXPECT_LE(start, now + 1) << text;
    EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos) << text;
  }
  EXPECT_FALSE(std::filesystem::exists(sd_path)) << "the target file outlived the exporter";
}

// A client that sends its request a byte at a time (or connects and says
// nothing) holds its own connection, not the exporter: Prometheus's scrape
// beside three of them is answered at once. The old server read one
// connection at a time with a 2 s bound per read, so a byte a second held
// every scrape for as long as the slow client liked.
TEST(Exporter, ASlowClientCannotBlockAScrape) {
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  auto e = Exporter::Start(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const int port = (*e)->port();
  std::atomic<bool> stop{false};
  std::vector<std::thread> slow;
  for (int k = 0; k < 3; ++k) {
    slow.emplace_back([&, k] {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
      const std::string req = "GET /metrics HTTP/1.0\r\nHost: a-very-slow-client\r\n\r\n";
      for (size_t i = 0; i < req.size() && !stop.load(); ++i) {
        if (k > 0) (void)!::send(fd, &req[i], 1, MSG_NOSIGNAL);  // client 0 says nothing at all
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      ::close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the slow ones are in
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = Scrape(port);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop.store(true);
  for (auto& t : slow) t.join();
  EXPECT_NE(text.find("200 OK"), std::string::npos) << text;
  EXPECT_LT(seconds, 1.0) << "the scrape waited for the slow clients";
}

// The state gauge: one series per state, 1 for the current one, so that an
// alert can tell a paused or starting run from a stalled one.
TEST(StatusMetrics, OneSeriesPerStateAndTheEta) {
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  o.service = "features";
  auto e = Exporter::Start(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  StatusMetrics m((*e)->registry(), "features");
  std::string text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_features_state{state=\"starting\"}"), 1.0) << text;
  EXPECT_EQ(Value(text, "scdino_features_state{state=\"paused\"}"), 0.0) << text;
  EXPECT_GT(Value(text, "scdino_features_start_time_seconds"), 1.7e9) << text;
  RunStatus s;
  s.state = RunState::kPaused;
  s.eta_seconds = 42.5;
  m.Set(s);
  text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_features_state{state=\"starting\"}"), 0.0) << text;
  EXPECT_EQ(Value(text, "scdino_features_state{state=\"paused\"}"), 1.0) << text;
  EXPECT_EQ(Value(text, "scdino_features_eta_seconds"), 42.5) << text;
  int states = 0;
  for (size_t at = text.find("\nscdino_features_state{"); at != std::string::npos;
       at = text.find("\nscdino_features_state{", at + 1)) {
    ++states;
  }
  EXPECT_EQ(states, 9);
  s.state = RunState::kPausing;
  m.Set(s);
  text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_features_state{state=\"pausing\"}"), 1.0) << text;
}

// kNN accuracy per checkpoint, epoch and k, as the dashboards plot it.
TEST(EvalMetrics, OneSeriesPerCheckpointAndK) {
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  o.service = "eval";
  auto e = Exporter::Start(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EvalMetrics m((*e)->registry());
  m.ReportKnn("checkpoint0002", 3, 20, 0.75, 0.625);
  m.ReportKnn("random_init", -1, 20, 0.5, 0.25);
  m.CheckpointEvaluated();
  m.CheckpointEvaluated();
  const std::string text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_eval_knn_top1_ratio{checkpoint=\"checkpoint0002\",epoch=\"3\",k=\"20\"}"), 0.75)
      << text;
  EXPECT_EQ(Value(text, "scdino_eval_knn_balanced_accuracy_ratio{checkpoint=\"checkpoint0002\",epoch=\"3\",k=\"20\"}"),
            0.625);
  EXPECT_EQ(Value(text, "scdino_eval_knn_top1_ratio{checkpoint=\"random_init\",epoch=\"none\",k=\"20\"}"), 0.5);
  EXPECT_EQ(Value(text, "scdino_eval_checkpoints_evaluated_total"), 2.0);
}

}  // namespace
}  // namespace scdino::metrics
