// The control layer against real gRPC peers in this process: the token file,
// endpoint files, the run-control state machine, and the server's calls,
// auth, health checking and reflection through real channels.
#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <fstream>
#include <thread>

#include "run/run_control.h"
#include "common/files.h"
#include "common/safetensors.h"
#include "control/client.h"
#include "control/endpoint.h"
#include "control/server.h"
#include "control/tls.h"
#include "control/token.h"
#include "scdino/v1/control.grpc.pb.h"
#include "support/test_support.h"

namespace scdino::control {
namespace {

using scdino::testing::ScratchDir;
namespace v1 = ::scdino::v1;

TEST(Token, CreatedPrivateOnceThenReused) {
  ScratchDir dir;
  const std::string path = dir.path() + "/control.token";
  auto a = LoadOrCreateToken(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto b = LoadOrCreateToken(path);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  ::chmod(path.c_str(), 0644);
  auto c = ReadToken(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("open to others (mode 644)"), std::string::npos) << c.status().message();
  auto missing = ReadToken(dir.path() + "/none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// What a client must never read and send: a symlink (to, say, the user's
// SSH key, which is 0600 and would pass a mode check), a FIFO (which would
// hang the client), a file of another user.
TEST(Token, ClientRefusesSymlinksPipesAndOtherUsersFiles) {
  ScratchDir dir;
  const std::string key = dir.file("id_ed25519");
  {
    std::ofstream(key) << "-----BEGIN OPENSSH PRIVATE KEY----- secret secret secret\n";
  }
  ::chmod(key.c_str(), 0600);
  const std::string link = dir.file("control.token");
  std::filesystem::create_symlink(key, link);
  auto viaLink = ReadToken(link);
  ASSERT_FALSE(viaLink.ok());
  EXPECT_NE(viaLink.status().message().find("symbolic link"), std::string::npos) << viaLink.status().message();
  const std::string fifo = dir.file("fifo.token");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto viaFifo = ReadToken(fifo);
  ASSERT_FALSE(viaFifo.ok());
  EXPECT_NE(viaFifo.status().message().find("not a regular file"), std::string::npos) << viaFifo.status().message();
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root (CI runs as root)";
  const std::string theirs = dir.file("theirs.token");
  {
    std::ofstream(theirs) << "0123456789abcdef0123456789abcdef\n";
  }
  ::chmod(theirs.c_str(), 0600);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  auto other = ReadToken(theirs);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("belongs to uid 65534"), std::string::npos) << other.status().message();
}

TEST(Token, ComparisonIsExactAndProofsDependOnTheToken) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("", "a"));
  // RFC 4231 test case 2.
  EXPECT_EQ(TokenProof("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(TokenProof("a-token-of-sixteen", "m"), TokenProof("b-token-of-sixteen", "m"));
}

Endpoint SampleEndpoint(const std::string& run_dir) {
  Endpoint e;
  e.service = "trainer";
  e.host = "node7";
  e.port = 4321;
  e.pid = 99;
  e.slurm_job_id = "12";
  e.run_dir = run_dir;
  return e;
}

TEST(Endpoint, RoundTripsWithAProofAndNamesAMissingFile) {
  ScratchDir dir;
  const std::string token = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(WriteEndpoint(dir.path(), SampleEndpoint(dir.path()), token).ok());
  auto r = ReadEndpoint(dir.path(), "trainer");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->target(), "node7:4321");
  EXPECT_EQ(r->slurm_job_id, "12");
  EXPECT_TRUE(VerifyEndpoint(*r, token, "e").ok());
  EXPECT_FALSE(VerifyEndpoint(*r, "another-token-0123456789", "e").ok());
  Endpoint moved = *r;
  moved.host = "attacker.example";
  auto v = VerifyEndpoint(moved, token, "e");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("refusing to send the token to attacker.example:4321"), std::string::npos) << v.message();
  RemoveEndpoint(dir.path(), "trainer");
  auto gone = ReadEndpoint(dir.path(), "trainer");
  ASSERT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("endpoints/trainer.json"), std::string::npos);
}

TEST(Endpoint, FilesOthersCanWriteAreRefused) {
  ScratchDir dir;
  ASSERT_TRUE(WriteEndpoint(dir.path(), SampleEndpoint(dir.path()), "0123456789abcdef0123456789abcdef").ok());
  const std::string path = EndpointPath(dir.path(), "trainer");
  ::chmod(path.c_str(), 0666);
  auto w = ReadEndpoint(dir.path(), "trainer");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("others can write"), std::string::npos) << w.status().message();
  ::chmod(path.c_str(), 0644);
  std::filesystem::rename(path, path + ".real");
  std::filesystem::create_symlink(path + ".real", path);
  auto l = ReadEndpoint(dir.path(), "trainer");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("symbolic link"), std::string::npos) << l.status().message();
}

// A planted endpoint in a real run directory: ResolveRun refuses it before
// any channel is opened, whatever it points to.
TEST(Endpoint, ResolveRunRefusesAnEndpointTheRunDidNotWrite) {
  ScratchDir dir;
  auto token = LoadOrCreateToken(dir.file("control.token"));
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE(WriteEndpoint(dir.path(), SampleEndpoint(dir.path()), *token).ok());
  auto good = ResolveRun(dir.path(), "trainer");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->target, "node7:4321");
  // Same fields, a proof made with another key.
  ASSERT_TRUE(WriteEndpoint(dir.path(), SampleEndpoint(dir.path()), "someone-elses-token-123").ok());
  auto bad = ResolveRun(dir.path(), "trainer");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad.status().message().find(*token), std::string::npos) << "the token leaked";
}

TEST(RunControl, PausingUntilTheLoopReachesItsBoundary) {
  RunControl c;
  c.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  ASSERT_TRUE(c.Pause().ok());
  EXPECT_EQ(c.Snapshot().state, RunState::kPausing);
  // A step's report does not hide the pending pause.
  c.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  EXPECT_EQ(c.Snapshot().state, RunState::kPausing);
  c.Update([](RunStatus& s) { s.state = RunState::kPaused; });
  EXPECT_EQ(c.Snapshot().state, RunState::kPaused);
  ASSERT_TRUE(c.Resume().ok());
  c.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  EXPECT_EQ(c.Snapshot().state, RunState::kRunning);
}

TEST(RunControl, RequestsAreRefusedAfterTheEnd) {
  RunControl c;
  ASSERT_TRUE(c.Pause().ok());
  EXPECT_TRUE(c.Requests().pause);
  ASSERT_TRUE(c.Resume().ok());
  EXPECT_FALSE(c.Requests().pause);
  auto pending = c.RequestCheckpoint();
  ASSERT_TRUE(pending.ok());
  c.Update([](RunStatus& s) { s.state = RunState::kCompleted; });
  // A checkpoint still waiting when the run ends gets an answer.
  auto r = pending->get();
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  auto p = c.Pause();
  EXPECT_EQ(p.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.message().find("COMPLETED"), std::string::npos);
}

// A server over a RunControl, and a thread standing in for a work loop that
// answers checkpoint requests as the trainer does.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.token = "0123456789abcdef0123456789abcdef";
    o.run_dir = dir_.path();
    o.run_id = "unit";
    o.on_unauthenticated = [this] { ++refused_; };
    auto s = ControlServer::Start(o, &control_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Control::NewStub(channel_);
    trainer_ = v1::Trainer::NewStub(channel_);
  }
  void Call(grpc::ClientContext* ctx, const std::string& token = "0123456789abcdef0123456789abcdef") {
    if (!token.empty()) AddToken(ctx, token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  ScratchDir dir_;
  RunControl control_;
  std::unique_ptr<ControlServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Control::Stub> stub_;
  std::unique_ptr<v1::Trainer::Stub> trainer_;
  std::atomic<int> refused_{0};
};

TEST_F(ServerTest, StatusNeedsTheToken) {
  control_.Update([](RunStatus& s) {
    s.state = RunState::kRunning;
    s.iteration = 7;
    s.iterations = 20;
    s.trainer.loss = 3.5;
    s.trainer.learning_check_epoch = 4;
    s.trainer.knn_top1 = 0.7;
    s.trainer.knn_random_top1 = 0.6;
    s.trainer.knn_pixels_top1 = 0.8;
    s.trainer.learning_margin = 0.01;
    s.trainer.learning_verdict = "did_not_learn";
  });
  v1::Status st;
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    auto r = stub_->GetStatus(&ctx, v1::GetStatusRequest(), &st);
    ASSERT_TRUE(r.ok()) << r.error_message();
  }
  EXPECT_EQ(st.state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(st.progress().iteration(), 7);
  EXPECT_EQ(st.trainer().loss(), 3.5);
  EXPECT_EQ(st.run().run_id(), "unit");
  EXPECT_EQ(st.service(), v1::SERVICE_KIND_TRAINER);
  // The learning check with both baselines and the verdict (scdinoctl's).
  EXPECT_EQ(st.trainer().learning().epoch(), 4);
  EXPECT_EQ(st.trainer().learning().random_knn_top1(), 0.6);
  EXPECT_EQ(st.trainer().learning().pixels_knn_top1(), 0.8);
  EXPECT_EQ(st.trainer().learning().margin(), 0.01);
  EXPECT_EQ(st.trainer().learning().verdict(), "did_not_learn");
  for (const std::string& token : {std::string(), std::string("0123456789abcdef0123456789abcdeX")}) {
    grpc::ClientContext ctx;
    Call(&ctx, token);
    auto r = stub_->GetStatus(&ctx, v1::GetStatusRequest(), &st);
    EXPECT_EQ(r.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(r.error_message().find("0123456789abcdef"), std::string::npos) << "the token leaked";
  }
  EXPECT_EQ(refused_.load(), 2);
  EXPECT_EQ(server_->refused_calls(), 2);
}

TEST_F(ServerTest, PauseResumeStopReachTheRunControl) {
  control_.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  v1::ControlReply reply;
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Pause(&ctx, v1::PauseRequest(), &reply).ok());
  }
  EXPECT_TRUE(control_.Requests().pause);
  // The loop has not reached its boundary: the reply says so.
  EXPECT_EQ(reply.state(), v1::RUN_STATE_PAUSING);
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Resume(&ctx, v1::ResumeRequest(), &reply).ok());
  }
  EXPECT_FALSE(control_.Requests().pause);
  EXPECT_EQ(reply.state(), v1::RUN_STATE_RUNNING);
  // A loop that got there first: the next Pause reply reports PAUSED.
  std::thread loop([this] {
    while (!control_.Requests().pause) control_.WaitForRequest(std::chrono::milliseconds(20));
    control_.HoldWhilePaused();
  });
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Pause(&ctx, v1::PauseRequest(), &reply).ok());
  }
  for (int i = 0; i < 100 && control_.Snapshot().state != RunState::kPaused; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(control_.Snapshot().state, RunState::kPaused);
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Pause(&ctx, v1::PauseRequest(), &reply).ok());
  }
  EXPECT_EQ(reply.state(), v1::RUN_STATE_PAUSED);
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Resume(&ctx, v1::ResumeRequest(), &reply).ok());
  }
  loop.join();
  EXPECT_EQ(control_.Snapshot().state, RunState::kRunning);
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    ASSERT_TRUE(stub_->Stop(&ctx, v1::StopRequest(), &reply).ok());
  }
  EXPECT_TRUE(control_.Requests().stop);
  control_.Update([](RunStatus& s) { s.state = RunState::kStopped; });
  grpc::ClientContext ctx;
  Call(&ctx);
  auto r = stub_->Pause(&ctx, v1::PauseRequest(), &reply);
  EXPECT_EQ(r.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServerTest, SaveCheckpointWaitsForTheLoop) {
  control_.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  std::thread loop([this] {
    while (!control_.Requests().checkpoint) control_.WaitForRequest(std::chrono::milliseconds(50));
    control_.CompleteCheckpoints(std::string("/runs/x/checkpoint_it00000012.safetensors"), 12);
  });
  grpc::ClientContext ctx;
  Call(&ctx);
  v1::SaveCheckpointReply reply;
  auto r = trainer_->SaveCheckpoint(&ctx, v1::SaveCheckpointRequest(), &reply);
  loop.join();
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(reply.path(), "/runs/x/checkpoint_it00000012.safetensors");
  EXPECT_EQ(reply.iteration(), 12);
}

TEST_F(ServerTest, WatchStreamsChangesUntilTheEnd) {
  grpc::ClientContext ctx;
  AddToken(&ctx, "0123456789abcdef0123456789abcdef");
  auto reader = stub_->WatchStatus(&ctx, v1::WatchStatusRequest());
  std::thread loop([this] {
    for (int i = 1; i <= 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      control_.Update([i](RunStatus& s) {
        s.state = RunState::kRunning;
        s.iteration = i;
      });
    }
    control_.Update([](RunStatus& s) { s.state = RunState::kCompleted; });
  });
  std::vector<v1::Status> seen;
  v1::Status s;
  while (reader->Read(&s)) seen.push_back(s);
  loop.join();
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.back().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_EQ(seen.back().progress().iteration(), 3);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].revision(), seen[i - 1].revision());
}

int ThreadsOfThisProcess() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// 3,000 idle WatchStatus streams, with the token, over 50 connections: the
// synchronous server gave each a thread (3,000 threads; a few thousand more
// exhaust a user's process limit, and then the shutdown could not make its
// watchdog). Now at most kMaxWatchStreams are served, the rest are refused
// RESOURCE_EXHAUSTED at once, the process's threads stay bounded, and the
// short calls still answer while the streams are open.
TEST_F(ServerTest, ThreeThousandIdleStreamsAreBoundedAndTheShortCallsStillAnswer) {
  control_.Update([](RunStatus& s) { s.state = RunState::kRunning; });
  const int before = ThreadsOfThisProcess();
  // A sanitizer runs the server ten or more times slower: a tenth of the
  // streams, the same bounds.
  const int kStreams = scdino::testing::kSanitizedAllocator ? 300 : 3000;
  constexpr int kChannels = 50;
  std::vector<std::unique_ptr<v1::Control::Stub>> stubs;
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    args.SetInt("scdino.test.channel", c);
    stubs.push_back(v1::Control::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials(), args)));
  }
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<v1::Status>> reader;
    v1::Status status;
    grpc::Status end;
    bool read = false, finished = false;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    auto st = std::make_unique<Stream>();
    AddToken(&st->ctx, "0123456789abcdef0123456789abcdef");
    st->reader = stubs[static_cast<size_t>(i % kChannels)]->PrepareAsyncWatchStatus(&st->ctx, v1::WatchStatusRequest(), &cq);
    st->reader->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(3 * i)));
    streams.push_back(std::move(st));
  }
  // Each call: started (tag 3i), then its first status read (3i+1) or, when
  // the read fails, its end (3i+2).
  int served = 0, refused = 0, other = 0;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(120);
  while (served + refused + other < kStreams) {
    void* tag = nullptr;
    bool ok = false;
    if (cq.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::NextStatus::GOT_EVENT) break;
    const intptr_t t = reinterpret_cast<intptr_t>(tag);
    Stream& st = *streams[static_cast<size_t>(t / 3)];
    if (t % 3 == 0) {
      st.reader->Read(&st.status, reinterpret_cast<void*>(t + 1));
    } else if (t % 3 == 1) {
      if (ok) {
        st.read = true;
        ++served;
      } else {
        st.reader->Finish(&st.end, reinterpret_cast<void*>(t + 1));
      }
    } else {
      st.finished = true;
      if (st.end.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++refused;
      } else {
        ++other;
        ADD_FAILURE() << "stream " << t / 3 << ": " << st.end.error_code() << " " << st.end.error_message();
      }
    }
  }
  const int during = ThreadsOfThisProcess();
  RecordProperty("served", served);
  RecordProperty("threads_added", during - before);
  EXPECT_EQ(served + refused, kStreams) << served << " served, " << refused << " refused, " << other << " other";
  EXPECT_LE(served, kMaxWatchStreams);
  EXPECT_GE(served, 1);
  EXPECT_LT(during - before, kMaxServerThreads + 64) << "threads: " << before << " before, " << during << " with the streams";
  // The short calls still answer.
  {
    grpc::ClientContext ctx;
    Call(&ctx);
    v1::GetStatusRequest req;
    v1::Status out;
    const grpc::Status st = stub_->GetStatus(&ctx, req, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  bool named = false;
  for (const auto& st : streams) {
    if (st->finished && st->end.error_message().find("too many WatchStatus streams") != std::string::npos) named = true;
  }
  EXPECT_TRUE(named);
  // The served streams cancelled and finished, then the queue drained.
  for (size_t i = 0; i < streams.size(); ++i) {
    if (!streams[i]->read) continue;
    streams[i]->ctx.TryCancel();
    streams[i]->reader->Finish(&streams[i]->end, reinterpret_cast<void*>(static_cast<intptr_t>(3 * i + 2)));
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ServerTest, ListsCheckpointsOfTheRunDirectory) {
  // Written by the safetensors writer the trainer uses.
  for (int it : {8, 4}) {
    ASSERT_TRUE(WriteSafetensors(dir_.path() + "/checkpoint" + std::to_string(it) + ".safetensors",
                                 {{"w", torch::zeros({2})}}, {{"iteration", std::to_string(it)}, {"epoch", "1"}})
                    .ok());
  }
  std::ofstream(dir_.path() + "/checkpoint_broken.safetensors") << "not a checkpoint";
  grpc::ClientContext ctx;
  Call(&ctx);
  v1::ListCheckpointsReply reply;
  ASSERT_TRUE(trainer_->ListCheckpoints(&ctx, v1::ListCheckpointsRequest(), &reply).ok());
  ASSERT_EQ(reply.checkpoints_size(), 2);
  EXPECT_EQ(reply.checkpoints(0).iteration(), 4);
  EXPECT_EQ(reply.checkpoints(1).iteration(), 8);
  EXPECT_GT(reply.checkpoints(1).size_bytes(), 0);
}

// grpc.health.v1 answers without a token; the requests and answers of
// health and reflection are encoded by hand (as a client without scdino's
// generated code would send them).
grpc::Status Unary(grpc::GenericStub& stub, const std::string& method, const std::string& request,
                   std::string* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  std::vector<grpc::Slice> slices;
  if (status.ok() && out.Dump(&slices).ok()) {
    for (const auto& s : slices) response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

TEST_F(ServerTest, HealthAnswersWithoutAToken) {
  grpc::GenericStub stub(channel_);
  for (const std::string service : {"", "scdino.v1.Control", "scdino.v1.Trainer"}) {
    // HealthCheckRequest{service}: field 1, length-delimited.
    std::string req;
    if (!service.empty()) req = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
    std::string resp;
    auto s = Unary(stub, "/grpc.health.v1.Health/Check", req, &resp);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(resp, std::string("\x08\x01", 2)) << service << ": expected status SERVING";
  }
}

// One reflection stream: `questions` (hand-encoded ServerReflectionRequest
// messages) written in turn, each answer read; the stream's status at the end.
grpc::Status Reflect(grpc::GenericStub& stub, const std::string& token, const std::vector<std::string>& questions,
                     std::vector<std::string>* answers) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  for (const auto& q : questions) {
    if (!ok) break;
    grpc::Slice req(q);
    grpc::ByteBuffer in(&req, 1), out;
    call->Write(in, reinterpret_cast<void*>(2));
    if (!cq.Next(&tag, &ok) || !ok) break;
    call->Read(&out, reinterpret_cast<void*>(3));
    if (!cq.Next(&tag, &ok) || !ok) break;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (out.Dump(&slices).ok()) {
      for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    answers->push_back(bytes);
  }
  call->WritesDone(reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return st;
}

// Reflection is behind the run's token, like every call but health's: the
// schema goes only to who may steer the run. Questions as grpcurl asks them.
TEST_F(ServerTest, ReflectionAnswersWithTheTokenOnly) {
  grpc::GenericStub stub(channel_);
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  const std::string list("\x3a\x00", 2);
  std::vector<std::string> answers;
  auto refused = Reflect(stub, "", {list}, &answers);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.error_message();
  EXPECT_TRUE(answers.empty());
  answers.clear();
  EXPECT_EQ(Reflect(stub, "wrong-token-wrong-token-wrong-tok", {list}, &answers).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_GE(server_->refused_calls(), 2);

  answers.clear();
  // file_containing_symbol (field 4) "scdino.v1.Control", then an unknown one.
  const std::string symbol = "scdino.v1.Control", unknown = "scdino.v1.NoSuchThing";
  const std::string by_symbol = std::string("\x22", 1) + static_cast<char>(symbol.size()) + symbol;
  const std::string by_unknown = std::string("\x22", 1) + static_cast<char>(unknown.size()) + unknown;
  auto served = Reflect(stub, "0123456789abcdef0123456789abcdef", {list, by_symbol, by_unknown}, &answers);
  ASSERT_TRUE(served.ok()) << served.error_message();
  ASSERT_EQ(answers.size(), 3u);
  for (const std::string name : {"scdino.v1.Control", "scdino.v1.Trainer", "grpc.health.v1.Health",
                                 "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_NE(answers[0].find(name), std::string::npos) << name;
  }
  // The file descriptor of scdino/v1/control.proto, with its methods.
  EXPECT_NE(answers[1].find("scdino/v1/control.proto"), std::string::npos);
  EXPECT_NE(answers[1].find("WatchStatus"), std::string::npos);
  // error_response (field 7) with NOT_FOUND (5) naming the symbol.
  EXPECT_NE(answers[2].find(std::string("\x3a", 1)), std::string::npos);
  EXPECT_NE(answers[2].find("scdino.v1.NoSuchThing is not known to this server"), std::string::npos);
}

TEST(ControlServer, RefusesHalfATlsConfigurationAndABusyPort) {
  RunControl c;
  ServerOptions o;
  o.token = "0123456789abcdef";
  o.tls_cert_file = "/x/cert.pem";
  auto a = ControlServer::Start(o, &c);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("both a certificate and a key"), std::string::npos);
  o.tls_cert_file.clear();
  o.listen_address = "127.0.0.1:0";
  auto first = ControlServer::Start(o, &c);
  ASSERT_TRUE(first.ok());
  o.listen_address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = ControlServer::Start(o, &c);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(o.listen_address), std::string::npos);
}

// A flood of bad calls is counted in full but logged only a few lines at a
// time, with the number left out said once the window ends.
TEST(ControlServer, RefusedCallsAreLoggedAtABoundedRate) {
  RunControl c;
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.token = "0123456789abcdef0123456789abcdef";
  o.refused_log_burst = 3;
  o.refused_log_window = std::chrono::seconds(1);
  std::mutex mu;
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  auto server = ControlServer::Start(o, &c);
  ASSERT_TRUE(server.ok());
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Control::NewStub(channel);
  auto bad_call = [&] {
    grpc::ClientContext ctx;
    AddToken(&ctx, "wrong-token-wrong-token");
    v1::Status st;
    return stub->GetStatus(&ctx, v1::GetStatusRequest(), &st).error_code();
  };
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(bad_call(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "too slow to test the window";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(lines.size(), 3u);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  bad_call();
  EXPECT_EQ((*server)->refused_calls(), 21);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[3].find("17 more refused calls were not logged"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("refused GetStatus"), std::string::npos) << lines[4];
}


// Each start makes its own key (0600) and self-signed certificate; the
// endpoint's fingerprint is that of the certificate file.
TEST(Tls, ARunsIdentityIsPrivateAndItsFingerprintIsTheCertificates) {
  ScratchDir dir;
  auto id = MakeSelfSignedIdentity(dir.file("tls"), "trainer", "trainer.scdino.invalid", "node7");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(id->key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.file("tls").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto pem = ReadFile(id->cert_file);
  ASSERT_TRUE(pem.ok());
  EXPECT_EQ(*CertificateFingerprint(*pem, "c"), id->fingerprint);
  EXPECT_EQ(id->fingerprint.size(), 7u + 64u);
  auto described = DescribeIdentity(id->cert_file, id->key_file);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  EXPECT_EQ(described->name, "trainer.scdino.invalid");
  EXPECT_EQ(described->fingerprint, id->fingerprint);
  auto again = MakeSelfSignedIdentity(dir.file("tls"), "trainer", "trainer.scdino.invalid", "node7");
  EXPECT_NE(again->fingerprint, id->fingerprint) << "a new start, a new key";
  EXPECT_FALSE(CertificateFingerprint("not a certificate", "x.crt").ok());
}

// A client pins the run's certificate: a server that cannot prove it holds
// the run's key (another key, or no TLS at all: whoever took the port after
// the run died) fails the handshake, and no call, hence no token, reaches it.
TEST(Tls, OnlyTheServerHoldingTheRunsKeyGetsACall) {
  ScratchDir dir;
  auto run = MakeSelfSignedIdentity(dir.file("run"), "trainer", "trainer.scdino.invalid", "node7");
  auto other = MakeSelfSignedIdentity(dir.file("other"), "trainer", "trainer.scdino.invalid", "node7");
  ASSERT_TRUE(run.ok() && other.ok());
  const std::string token = "0123456789abcdef0123456789abcdef";
  auto call = [&](int port) {
    ClientTarget t;
    t.target = "127.0.0.1:" + std::to_string(port);
    t.token = token;
    t.tls = true;
    t.tls_root_pem = *ReadFile(run->cert_file);
    t.tls_name = run->name;
    auto channel = OpenChannel(t);
    auto stub = v1::Control::NewStub(*channel);
    grpc::ClientContext ctx;
    AddToken(&ctx, t.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    v1::Status out;
    return stub->GetStatus(&ctx, v1::GetStatusRequest(), &out);
  };
  for (bool impostor_tls : {true, false}) {
    RunControl control;
    std::atomic<int> calls{0};
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.token = "impostor-does-not-know-the-token";  // every call it gets is counted
    o.on_unauthenticated = [&] { ++calls; };
    o.log = [](const std::string&) {};
    if (impostor_tls) {
      o.tls_cert_file = other->cert_file;
      o.tls_key_file = other->key_file;
    }
    auto impostor = ControlServer::Start(o, &control);
    ASSERT_TRUE(impostor.ok());
    const grpc::Status st = call((*impostor)->port());
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_EQ(calls.load(), 0) << (impostor_tls ? "a server with another key" : "a plaintext server") << " got a call";
  }
  RunControl control;
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.token = token;
  o.tls_cert_file = run->cert_file;
  o.tls_key_file = run->key_file;
  auto real = ControlServer::Start(o, &control);
  ASSERT_TRUE(real.ok());
  const grpc::Status st = call((*real)->port());
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// After a SIGKILL the endpoint file stays, with a valid proof. On the host
// and in the pid namespace where it was written, a client sees that its
// process is gone (its pid free, or reused by a later process) and sends
// nothing anywhere.
TEST(Endpoint, AStaleEndpointOfAGoneProcessIsNamedAndNothingIsSent) {
  ScratchDir dir;
  auto token = LoadOrCreateToken(dir.file("control.token"));
  ASSERT_TRUE(token.ok());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  Endpoint e = SampleEndpoint(dir.path());
  e.host = host;
  RecordThisProcess(&e);
  ASSERT_FALSE(e.pid_namespace.empty());
  ASSERT_FALSE(e.process_start.empty());
  e.pid = ::getpid();
  EXPECT_EQ(EndpointProcessState(e, host), ProcessState::kRunning);
  EXPECT_EQ(EndpointProcessState(e, "another-node"), ProcessState::kUnknown);
  Endpoint reused = e;
  reused.process_start = "1";  // this pid, but a process that started at boot
  EXPECT_EQ(EndpointProcessState(reused, host), ProcessState::kGone);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  e.pid = child;
  EXPECT_EQ(EndpointProcessState(e, host), ProcessState::kGone);
  ASSERT_TRUE(WriteEndpoint(dir.path(), e, *token).ok());
  auto r = ResolveRun(dir.path(), "trainer");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("stale endpoint file: the trainer process " + std::to_string(child)),
            std::string::npos)
      << r.status().message();
}

// A server killed mid-stream: its clients see their connections close
// before its parent has reaped it. Ended but not reaped (a zombie), its
// process is gone for a client as well, not running.
TEST(Endpoint, AnEndedProcessNotYetReapedIsGone) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // async-signal-safe calls only (this process has threads)
    char byte;
    ::_exit(::read(go[0], &byte, 1) == 1 ? 0 : 1);
  }
  ::close(go[0]);
  const std::string stat_path = "/proc/" + std::to_string(child) + "/stat";
  Endpoint e = SampleEndpoint("/nonexistent");
  e.host = host;
  RecordThisProcess(&e);  // this host and pid namespace
  e.pid = child;
  e.process_start = ReadProcStat(stat_path).start_ticks;
  ASSERT_FALSE(e.process_start.empty());
  EXPECT_EQ(EndpointProcessState(e, host), ProcessState::kRunning);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  // Ended: its state reads Z until the wait below.
  bool zombie = false;
  for (int i = 0; i < 500 && !zombie; ++i) {
    zombie = ReadProcStat(stat_path).state == "Z";
    if (!zombie) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(zombie) << stat_path;
  EXPECT_EQ(EndpointProcessState(e, host), ProcessState::kGone);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(go[1]);
}

// The code of a GetStatus call to `stub` presenting `token`.
grpc::StatusCode StatusCodeWith(v1::Control::Stub& stub, const std::string& token) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::Status out;
  return stub.GetStatus(&ctx, v1::GetStatusRequest(), &out).error_code();
}

// scdinoctl rotate-token: a new token, the running server takes it at the
// next call that presents it, the old one is refused from then on, and the
// endpoint file is signed with the new one.
TEST(Token, RotationReplacesTheTokenOfARunningServer) {
  ScratchDir dir;
  auto old = LoadOrCreateToken(dir.file("control.token"));
  ASSERT_TRUE(old.ok());
  RunControl control;
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.token = *old;
  o.token_file = dir.file("control.token");
  o.log = [](const std::string&) {};
  auto server = ControlServer::Start(o, &control);
  ASSERT_TRUE(server.ok());
  Endpoint e = SampleEndpoint(dir.path());
  e.port = (*server)->port();
  ASSERT_TRUE(WriteEndpoint(dir.path(), e, *old).ok());
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Control::NewStub(channel);
  auto status_with = [&](const std::string& token) { return StatusCodeWith(*stub, token); };
  EXPECT_EQ(status_with(*old), grpc::StatusCode::OK);
  auto rotated = RotateToken(dir.path());
  ASSERT_TRUE(rotated.ok()) << rotated.status().ToString();
  EXPECT_EQ(*rotated, std::vector<std::string>{"trainer"});
  // The old token is refused from the moment of the rotation, before any
  // caller has presented the new one.
  EXPECT_EQ(status_with(*old), grpc::StatusCode::UNAUTHENTICATED);
  auto fresh = ReadToken(dir.file("control.token"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(*fresh, *old);
  EXPECT_EQ(status_with(*fresh), grpc::StatusCode::OK);
  EXPECT_EQ(status_with(*old), grpc::StatusCode::UNAUTHENTICATED);
  auto r = ResolveRun(dir.path(), "trainer");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->token, *fresh);
}

// A token file that is removed, or made readable by others, leaves no
// valid token: every call is refused (logged once) until a good file is
// back, and then its token is served.
TEST(Token, AMissingOrUnusableTokenFileRefusesEveryCall) {
  ScratchDir dir;
  const std::string file = dir.file("control.token");
  auto token = LoadOrCreateToken(file);
  ASSERT_TRUE(token.ok());
  RunControl control;
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.token = *token;
  o.token_file = file;
  o.run_dir = dir.path();
  std::mutex mu;
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  auto server = ControlServer::Start(o, &control);
  ASSERT_TRUE(server.ok());
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  auto status_with = [&](const std::string& token) { return StatusCodeWith(*stub, token); };
  auto count = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  EXPECT_EQ(status_with(*token), grpc::StatusCode::OK);
  ASSERT_EQ(::unlink(file.c_str()), 0);
  EXPECT_EQ(status_with(*token), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status_with(*token), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status_with(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(count("token file cannot be used (" + file + ": No such file"), 1) << "logged once, naming the file";

  // Back, but readable by others: still refused, and not logged again.
  ASSERT_TRUE(WriteFileAtomic(file, *token + "\n", 0644).ok());
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  EXPECT_EQ(status_with(*token), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(count("token file cannot be used"), 1);

  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  EXPECT_EQ(status_with(*token), grpc::StatusCode::OK);
  EXPECT_EQ(count("readable again"), 1);
}

}  // namespace
}  // namespace scdino::control
