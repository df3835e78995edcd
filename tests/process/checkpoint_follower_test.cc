// The follower against a real control server over a run directory, as
// scdino-eval --follow meets the trainer: checkpoints already written and
// new ones, the resume point left out, the end seen through the status
// stream or through the end record when it was not watching, an absent
// trainer retried and then given up on, a stop obeyed.
#include "process/checkpoint_follower.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "run/run_control.h"
#include "common/safetensors.h"
#include "control/endpoint.h"
#include "control/server.h"
#include "control/token.h"
#include "support/test_support.h"

namespace scdino::process {
namespace {

using namespace std::chrono_literals;
using scdino::testing::ScratchDir;

void WriteCheckpoint(const std::string& path, int64_t iteration, int64_t epoch) {
  ASSERT_TRUE(WriteSafetensors(path, {{"w", torch::zeros({2})}},
                               {{"iteration", std::to_string(iteration)}, {"epoch", std::to_string(epoch)}})
                  .ok());
}

// A trainer's control side: server, token, endpoint file, as the
// ServicePlane sets them up.
class Trainer {
 public:
  explicit Trainer(const std::string& run_dir) : run_dir_(run_dir) {
    auto token = control::LoadOrCreateToken(run_dir + "/control.token");
    EXPECT_TRUE(token.ok()) << token.status().ToString();
    control::ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.token = *token;
    o.run_dir = run_dir;
    auto s = control::ControlServer::Start(o, &control_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    control::Endpoint e;
    e.service = "trainer";
    e.host = "127.0.0.1";
    e.port = server_->port();
    e.pid = 1;
    e.run_dir = run_dir;
    EXPECT_TRUE(control::WriteEndpoint(run_dir, e, *token).ok());
    control_.Update([](RunStatus& st) { st.state = RunState::kRunning; });
  }
  void Checkpoint(const std::string& name, int64_t iteration, int64_t epoch) {
    WriteCheckpoint(run_dir_ + "/" + name, iteration, epoch);
    control_.Update([&](RunStatus& st) {
      st.trainer.last_checkpoint = run_dir_ + "/" + name;
      st.trainer.last_checkpoint_unix_ms = ++clock_;
    });
  }
  void End(RunState state) {
    control_.Update([&](RunStatus& st) { st.state = state; });
    std::this_thread::sleep_for(300ms);
    server_->Shutdown();
    control::ServiceEnded ended;
    ended.service = "trainer";
    ended.state = RunStateName(state);
    EXPECT_TRUE(control::WriteEnded(run_dir_, ended).ok());
    control::RemoveEndpoint(run_dir_, "trainer");
  }

 private:
  std::string run_dir_;
  RunControl control_;
  std::unique_ptr<control::ControlServer> server_;
  int64_t clock_ = 1;
};

std::vector<std::string> Names(const std::vector<CheckpointEntry>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(std::filesystem::path(c.path).filename().string());
  return out;
}

FollowOptions Options(const std::string& run_dir, std::ostream* log) {
  FollowOptions o;
  o.run_dir = run_dir;
  o.first_retry = 50ms;
  o.max_retry = 200ms;
  o.give_up = 3s;
  o.log = log;
  return o;
}

TEST(CheckpointFollower, FollowsNewCheckpointsToTheEnd) {
  ScratchDir dir;
  Trainer trainer(dir.path());
  WriteCheckpoint(dir.path() + "/checkpoint0000.safetensors", 4, 1);
  WriteCheckpoint(dir.path() + "/checkpoint.safetensors", 4, 1);  // the resume point: never followed
  std::ostringstream log;
  CheckpointFollower f(Options(dir.path(), &log));
  auto first = f.Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(Names(first->checkpoints), std::vector<std::string>{"checkpoint0000.safetensors"});
  EXPECT_FALSE(first->ended);
  std::thread loop([&] {
    std::this_thread::sleep_for(300ms);
    trainer.Checkpoint("checkpoint.safetensors", 6, 1);
    std::this_thread::sleep_for(200ms);
    trainer.Checkpoint("checkpoint0001.safetensors", 8, 2);
  });
  auto second = f.Next();
  loop.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Names(second->checkpoints), std::vector<std::string>{"checkpoint0001.safetensors"});
  EXPECT_EQ(second->checkpoints[0].epoch, 2);
  EXPECT_EQ(second->checkpoints[0].iteration, 8);
  // The last checkpoint comes with the end.
  std::thread end([&] {
    std::this_thread::sleep_for(300ms);
    trainer.Checkpoint("checkpoint0002.safetensors", 12, 3);
    trainer.End(RunState::kCompleted);
  });
  std::vector<std::string> rest;
  bool ended = false;
  for (int i = 0; i < 3 && !ended; ++i) {
    auto e = f.Next();
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    for (auto& n : Names(e->checkpoints)) rest.push_back(n);
    ended = e->ended;
    if (ended) {
      EXPECT_EQ(e->final_state, RunState::kCompleted);
    }
  }
  end.join();
  EXPECT_TRUE(ended);
  EXPECT_EQ(rest, std::vector<std::string>{"checkpoint0002.safetensors"});
}

TEST(CheckpointFollower, AStartAfterTheEndReadsTheEndRecord) {
  ScratchDir dir;
  {
    Trainer trainer(dir.path());
    trainer.Checkpoint("checkpoint0000.safetensors", 4, 1);
    trainer.End(RunState::kStopped);
  }
  std::vector<std::string> seen;
  auto s = FollowCheckpoints(Options(dir.path(), nullptr), [&](const CheckpointEntry& c) {
    seen.push_back(std::filesystem::path(c.path).filename().string());
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, std::vector<std::string>{"checkpoint0000.safetensors"});
}

TEST(CheckpointFollower, WaitsForALateTrainerAndSaysSo) {
  ScratchDir dir;
  std::ostringstream log;
  CheckpointFollower f(Options(dir.path(), &log));
  std::unique_ptr<Trainer> trainer;
  std::thread late([&] {
    std::this_thread::sleep_for(500ms);
    trainer = std::make_unique<Trainer>(dir.path());
    trainer->Checkpoint("checkpoint0000.safetensors", 4, 1);
  });
  auto e = f.Next();
  late.join();
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(Names(e->checkpoints), std::vector<std::string>{"checkpoint0000.safetensors"});
  EXPECT_NE(log.str().find("waiting for the trainer"), std::string::npos) << log.str();
}

TEST(CheckpointFollower, GivesUpOnATrainerThatNeverComes) {
  ScratchDir dir;
  auto o = Options(dir.path(), nullptr);
  o.give_up = 400ms;
  CheckpointFollower f(o);
  auto e = f.Next();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(e.status().message().find("unreachable"), std::string::npos) << e.status().message();
}

TEST(CheckpointFollower, AStopEndsTheWatchWithinASecond) {
  ScratchDir dir;
  Trainer trainer(dir.path());
  std::atomic<bool> stop{false};
  auto o = Options(dir.path(), nullptr);
  o.should_stop = [&] { return stop.load(); };
  CheckpointFollower f(o);
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto e = f.Next();
  stopper.join();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kAborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
}

TEST(CheckpointFollower, FollowsOnlyNumberedCheckpointsAndSnapshots) {
  EXPECT_TRUE(IsFollowedCheckpoint("/r/checkpoint0003.safetensors"));
  EXPECT_TRUE(IsFollowedCheckpoint("/r/checkpoint_it00000012.safetensors"));
  EXPECT_FALSE(IsFollowedCheckpoint("/r/checkpoint.safetensors"));
  EXPECT_FALSE(IsFollowedCheckpoint("/r/checkpoint0003.safetensors.tmp.host~1~2"));
  EXPECT_FALSE(IsFollowedCheckpoint("/r/features.npy"));
}

}  // namespace
}  // namespace scdino::process
