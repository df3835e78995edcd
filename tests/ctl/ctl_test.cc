// scdinoctl's logic (ctl/ctl.h): its command line, its tables and lines,
// and its commands against a real control server over a RunControl.
#include "ctl/ctl.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include "control/endpoint.h"
#include "control/server.h"
#include "control/token.h"
#include "support/test_support.h"

namespace scdino::ctl {
namespace {

struct Parsed {
  std::optional<int> code;
  Options o;
  std::string out, err;
};

Parsed Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "scdinoctl");
  Parsed p;
  std::ostringstream out, err;
  p.code = ParseCommandLine(static_cast<int>(args.size()), args.data(), &p.o, out, err);
  p.out = out.str();
  p.err = err.str();
  return p;
}

// Parses and runs a command line as scdinoctl's main does.
Parsed Execute(std::vector<const char*> args) {
  Parsed p = Parse(std::move(args));
  if (p.code) return p;
  std::ostringstream out, err;
  p.code = scdino::ctl::Run(p.o, out, err);
  p.out = out.str();
  p.err = err.str();
  return p;
}

// An executable shell script at `path`: a stand-in for Slurm's squeue.
void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

// A service's control plane for `run_dir`: a server over `control` and its
// endpoint file (in Slurm job `job`, started at `start_unix_ms`, when
// given), as a service writes them. Null when either fails.
std::unique_ptr<control::ControlServer> ServeRun(const std::string& run_dir, const std::string& token,
                                                 const std::string& run_id, RunControl& control,
                                                 const std::string& job = "", int64_t start_unix_ms = 0) {
  control::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.token = token;
  o.run_dir = run_dir;
  o.run_id = run_id;
  auto server = control::ControlServer::Start(o, &control);
  if (!server.ok()) return nullptr;
  control::Endpoint e;
  e.service = "trainer";
  e.host = "127.0.0.1";
  e.port = (*server)->port();
  e.pid = ::getpid();
  e.run_dir = std::filesystem::absolute(run_dir).string();
  e.slurm_job_id = job;
  e.start_unix_ms = start_unix_ms;
  control::RecordThisProcess(&e);
  if (!control::WriteEndpoint(run_dir, e, token).ok()) return nullptr;
  return std::move(server).value();
}

TEST(CtlCommandLine, NeedsOneOfRunDirAndTargetAndSetsEachCommandsTimeout) {
  auto both = Parse({"status", "--run-dir", "runs/x", "--target", "h:1"});
  EXPECT_EQ(both.code, kBadArguments);
  EXPECT_NE(both.err.find("give either --run-dir DIR or --target HOST:PORT"), std::string::npos) << both.err;
  auto neither = Parse({"status"});
  EXPECT_EQ(neither.code, kBadArguments);
  auto unknown = Parse({"explode", "--run-dir", "runs/x"});
  EXPECT_EQ(unknown.code, kBadArguments);
  auto status = Parse({"status", "--run-dir", "runs/x"});
  ASSERT_FALSE(status.code.has_value()) << status.err;
  EXPECT_EQ(status.o.command, "status");
  EXPECT_EQ(status.o.timeout, 10);
  auto checkpoint = Parse({"checkpoint", "--run-dir", "runs/x", "--service", "trainer"});
  ASSERT_FALSE(checkpoint.code.has_value()) << checkpoint.err;
  EXPECT_EQ(checkpoint.o.timeout, 600) << "a checkpoint may take minutes to write";
  auto service = Parse({"status", "--run-dir", "runs/x", "--service", "painter"});
  EXPECT_EQ(service.code, kBadArguments);
  EXPECT_NE(service.err.find("painter"), std::string::npos) << service.err;
  auto help = Parse({"--help"});
  EXPECT_EQ(help.code, kOk);
  EXPECT_NE(help.out.find("rotate-token"), std::string::npos);
}

TEST(CtlCommandLine, WatchTakesASlurmJobOrArrayTaskWithItsRunDirectory) {
  auto task = Parse({"watch", "--run-dir", "runs/x", "--job", "4711_3"});
  ASSERT_FALSE(task.code.has_value()) << task.err;
  EXPECT_EQ(task.o.job, "4711_3");
  for (const char* bad : {"47x", "_3", "4711_", "4711_3_1", ""}) {
    auto p = Parse({"watch", "--run-dir", "runs/x", "--job", bad});
    EXPECT_EQ(p.code, kBadArguments) << bad;
    EXPECT_NE(p.err.find("expected a Slurm job id (123) or array task (123_4)"), std::string::npos) << p.err;
  }
  auto no_dir = Parse({"watch", "--target", "h:1", "--job", "4711"});
  EXPECT_EQ(no_dir.code, kBadArguments);
  EXPECT_NE(no_dir.err.find("watch --job needs --run-dir"), std::string::npos) << no_dir.err;
}

// Where Slurm's client is not beside scdinoctl (the image on a login node),
// SCDINO_SQUEUE names what answers for it (deploy/slurm/scdinoctl.sh's
// relay): it is asked as squeue would be, and a name it cannot run is
// refused before the watch waits.
TEST(CtlWatchJob, AsksTheProgramScdinoSqueueNamesAndRefusesOneItCannotRun) {
  scdino::testing::ScratchDir dir;
  const std::string relay = dir.file("relay"), asked = dir.file("asked"), run_dir = dir.file("never-started");
  WriteScript(relay, "echo \"$@\" > " + asked + "\n");  // lists nothing: the job left the queue
  ::setenv("SCDINO_SQUEUE", relay.c_str(), 1);
  auto gone = Execute({"watch", "--job", "4711_2", "--run-dir", run_dir.c_str()});
  EXPECT_EQ(gone.code, kFailed) << gone.err;
  EXPECT_NE(gone.err.find("Slurm job 4711_2 left the queue and the trainer of " + run_dir + " never started"),
            std::string::npos)
      << gone.err;
  std::ifstream args(asked);
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "-h -o %T -j 4711_2");
  ::setenv("SCDINO_SQUEUE", (relay + ";true").c_str(), 1);
  auto odd = Execute({"watch", "--job", "4711", "--run-dir", run_dir.c_str()});
  EXPECT_EQ(odd.code, kBadArguments);
  EXPECT_NE(odd.err.find("SCDINO_SQUEUE: expected a program's path"), std::string::npos) << odd.err;
  ::setenv("SCDINO_SQUEUE", dir.file("nowhere").c_str(), 1);
  auto missing = Execute({"watch", "--job", "4711", "--run-dir", run_dir.c_str()});
  EXPECT_EQ(missing.code, kBadArguments);
  EXPECT_NE(missing.err.find("SCDINO_SQUEUE=" + dir.file("nowhere") + ": no such program"), std::string::npos)
      << missing.err;
  ::unsetenv("SCDINO_SQUEUE");
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A run in Slurm job 88, which Slurm lists all along (a stand-in squeue
// answers RUNNING) while the job requeues: each life is a control server
// and its endpoint file, as a service writes them.
class CtlRequeuedJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir_ = dir_.file("run");
    std::filesystem::create_directories(run_dir_);
    auto token = control::LoadOrCreateToken(run_dir_ + "/control.token");
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    token_ = *token;
    WriteScript(dir_.file("squeue"), "echo RUNNING\n");
    ::setenv("SCDINO_SQUEUE", dir_.file("squeue").c_str(), 1);
  }
  void TearDown() override { ::unsetenv("SCDINO_SQUEUE"); }
  // One life: its state, then its server and endpoint file (null: failed).
  std::unique_ptr<control::ControlServer> Serve(RunControl& control, RunState state, int64_t start_ms) {
    control.Update([&](RunStatus& st) { st.state = state; });
    return ServeRun(run_dir_, token_, "requeued", control, "88", start_ms);
  }
  // The job's next life, which completes: its server, then its end record.
  void CompleteTheNextLife() {
    last_server_ = Serve(last_, RunState::kCompleted, NowMs());
    ASSERT_NE(last_server_, nullptr);
    control::ServiceEnded ended;
    ended.service = "trainer";
    ended.state = "COMPLETED";
    ended.exit_code = 0;
    ended.slurm_job_id = "88";
    ended.end_unix_ms = NowMs() + 1;
    ASSERT_TRUE(control::WriteEnded(run_dir_, ended).ok());
  }
  scdino::testing::ScratchDir dir_;
  std::string run_dir_, token_;
  RunControl last_;
  std::unique_ptr<control::ControlServer> last_server_;
};

// A life killed before it wrote its end record (SIGKILL: a child process
// serving the run, killed): the watch says so and follows the job to its
// next life, which completes.
TEST_F(CtlRequeuedJobTest, WatchFollowsItPastALifeKilledBeforeItsEndRecord) {
  const int64_t first_start = NowMs();
  const pid_t first = ::fork();
  ASSERT_GE(first, 0);
  if (first == 0) {
    RunControl control;
    auto server = Serve(control, RunState::kRunning, first_start);
    if (!server) ::_exit(1);
    for (;;) ::pause();
  }
  for (int i = 0; i < 100; ++i) {
    auto e = control::ReadEndpoint(run_dir_, "trainer");
    if (e.ok() && e->pid == first) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Parsed watched;
  std::thread watch([&] { watched = Execute({"watch", "--run-dir", run_dir_.c_str(), "--timeout", "5"}); });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  // The next life starts after the watch saw the kill (at once: the process
  // is gone from this host).
  std::this_thread::sleep_for(std::chrono::seconds(3));
  CompleteTheNextLife();
  watch.join();
  EXPECT_EQ(watched.code, kOk) << watched.out << watched.err;
  EXPECT_NE(watched.err.find("the trainer of " + run_dir_ + " went away without its end record"), std::string::npos)
      << watched.err;
  EXPECT_NE(watched.err.find("Slurm job 88 is still queued: waiting for its next start"), std::string::npos)
      << watched.err;
  EXPECT_NE((watched.out + watched.err).find("COMPLETED"), std::string::npos) << watched.out << watched.err;
}

// A life that ended (a stop: its end record written, its endpoint file
// removed) after the watch found it but before its stream answered: the
// watch reads that end, as when a stream breaks, and follows the job to its
// next life, which completes (not "not reachable", exit 3).
TEST_F(CtlRequeuedJobTest, WatchFollowsItPastALifeThatEndedBeforeItsStreamAnswered) {
  // The first life's endpoint file, its server already gone: the watch
  // finds the file (its process, this one, runs) and cannot connect.
  RunControl first;
  ASSERT_NE(Serve(first, RunState::kRunning, NowMs()), nullptr);
  Parsed watched;
  std::thread watch([&] { watched = Execute({"watch", "--run-dir", run_dir_.c_str(), "--timeout", "3"}); });
  // While the watch connects: the life's end, as the trainer writes it at a
  // stop signal the batch scripts requeue.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::filesystem::remove(control::EndpointPath(run_dir_, "trainer"));
  control::ServiceEnded stopped;
  stopped.service = "trainer";
  stopped.state = "STOPPED";
  stopped.exit_code = 75;
  stopped.requeue = "always";
  stopped.slurm_job_id = "88";
  stopped.end_unix_ms = NowMs();
  ASSERT_TRUE(control::WriteEnded(run_dir_, stopped).ok());
  // The next life starts once the watch has given up connecting.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  CompleteTheNextLife();
  watch.join();
  EXPECT_EQ(watched.code, kOk) << watched.out << watched.err;
  EXPECT_NE(watched.err.find("ended STOPPED (exit 75); Slurm job 88 is still queued: waiting for its next start"),
            std::string::npos)
      << watched.err;
  EXPECT_EQ(watched.err.find("not reachable"), std::string::npos) << watched.err;
  EXPECT_NE((watched.out + watched.err).find("COMPLETED"), std::string::npos) << watched.out << watched.err;
}

TEST(CtlFormat, DurationsAndStages) {
  EXPECT_EQ(Duration(0), "-");
  EXPECT_EQ(Duration(7.4), "7s");
  EXPECT_EQ(Duration(185), "3m05s");
  EXPECT_EQ(Duration(3725), "1h02m");
  v1::Progress p;
  p.set_stage("linear probe");
  p.set_stage_unit("fits");
  p.set_stage_done(3);
  p.set_stage_total(6);
  p.set_stage_per_second(0.4);
  p.set_stage_eta_seconds(8);
  EXPECT_EQ(Stage(p), "linear probe: fits 3/6 (50%), 0.40 fits/s, ETA 8s");
  p.set_stage_finished(true);
  p.set_stage_done(6);
  EXPECT_EQ(Stage(p), "linear probe: 6 fits, done");
}

// The trainer's table: every row it sends, the learning check judged.
TEST(CtlFormat, TheTrainersTableHasEveryRowItSends) {
  v1::Status s;
  s.set_service(v1::SERVICE_KIND_TRAINER);
  s.set_state(v1::RUN_STATE_RUNNING);
  auto* p = s.mutable_progress();
  p->set_epoch(2);
  p->set_epochs(10);
  p->set_iteration(30);
  p->set_iterations(120);
  p->set_items_per_second(41.25);
  p->set_eta_seconds(185);
  auto* r = s.mutable_run();
  r->set_run_id("cells");
  r->set_run_dir("/runs/cells");
  r->set_host("node1");
  r->set_world_size(4);
  r->set_slurm_job_id("77");
  r->set_slurm_step_id("0");
  auto* t = s.mutable_trainer();
  t->set_loss(7.123456);
  t->mutable_learning()->set_epoch(3);
  t->mutable_learning()->set_knn_top1(0.8);
  t->mutable_learning()->set_random_knn_top1(0.5);
  t->mutable_learning()->set_pixels_knn_top1(0.6);
  t->mutable_learning()->set_margin(0.02);
  t->mutable_learning()->set_verdict("learned");
  t->mutable_recoveries()->set_count(1);
  t->mutable_recoveries()->set_max(3);
  t->mutable_recoveries()->set_last("uniform_collapse at iteration 20");
  const std::string table = StatusTable(s);
  for (const std::string row : {"service     trainer\n", "run         cells (/runs/cells)\n", "state       RUNNING\n",
                                "progress    epoch 3/10, iteration 30/120 (25.0%)\n",
                                "speed       41.2 items/s, ETA 3m05s\n", "loss        7.12346\n",
                                "learning    epoch 3: teacher 0.800, random ViT 0.500 (+0.300), raw pixels 0.600 "
                                "(+0.200): learned so far\n",
                                "recoveries  1 of 3; last: uniform_collapse at iteration 20\n",
                                "slurm       job 77 step 0\n"}) {
    EXPECT_NE(table.find(row), std::string::npos) << "no row " << row << "in\n" << table;
  }
  EXPECT_EQ(table.find("nonfinite"), std::string::npos) << "a row for none";
  const std::string line = StatusLine(s, 0);
  EXPECT_NE(line.find("RUNNING    it 30/120 epoch 3/10 41.2 items/s ETA 3m05s loss 7.12346\n"), std::string::npos)
      << line;
}

// A control server over a RunControl, its token in a file, as a service
// serves it; the commands run as scdinoctl runs them.
class CtlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/control.token";
    auto token = control::LoadOrCreateToken(token_file_);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    control::ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.token = *token;
    o.run_dir = dir_.path();
    o.run_id = "ctl";
    auto s = control::ControlServer::Start(o, &control_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    target_ = "127.0.0.1:" + std::to_string(server_->port());
    control_.Update([](RunStatus& st) { st.state = RunState::kRunning; });
  }
  int Command(std::vector<const char*> args, const std::string& token_file = "") {
    const std::string tokens = token_file.empty() ? token_file_ : token_file;
    args.insert(args.end(), {"--target", target_.c_str(), "--token-file", tokens.c_str(), "--timeout", "5"});
    const Parsed r = Execute(args);
    out_ = r.out;
    err_ = r.err;
    return *r.code;
  }
  scdino::testing::ScratchDir dir_;
  std::string token_file_, target_, out_, err_;
  RunControl control_;
  std::unique_ptr<control::ControlServer> server_;
};

TEST_F(CtlServerTest, StatusAndStopReachTheRun) {
  ASSERT_EQ(Command({"status"}), kOk) << err_;
  EXPECT_NE(out_.find("state       RUNNING\n"), std::string::npos) << out_;
  EXPECT_NE(out_.find("run         ctl ("), std::string::npos) << out_;
  ASSERT_EQ(Command({"status", "--json"}), kOk) << err_;
  EXPECT_NE(out_.find("\"state\":\"RUN_STATE_RUNNING\""), std::string::npos) << out_;
  EXPECT_FALSE(control_.Requests().stop);
  ASSERT_EQ(Command({"stop"}), kOk) << err_;
  EXPECT_EQ(out_, "stop: requested; the run is RUNNING\n");
  EXPECT_TRUE(control_.Requests().stop) << "the stop did not reach the run";
}

TEST_F(CtlServerTest, AWrongTokenAnUnreachableServerAndAMissingTokenFileEachHaveTheirCode) {
  const std::string wrong = dir_.path() + "/wrong.token";
  ASSERT_TRUE(control::LoadOrCreateToken(wrong).ok());
  EXPECT_EQ(Command({"status"}, wrong), kUnauthenticated) << err_;
  EXPECT_FALSE(control_.Requests().stop);
  EXPECT_EQ(Command({"stop"}, wrong), kUnauthenticated) << err_;
  EXPECT_FALSE(control_.Requests().stop) << "a stop with another run's token reached the run";
  EXPECT_EQ(Command({"status"}, dir_.path() + "/none.token"), kNotFound) << err_;
  server_.reset();
  EXPECT_EQ(Command({"status"}), kUnreachable) << err_;
  EXPECT_NE(err_.find("scdinoctl: 127.0.0.1:"), std::string::npos) << err_;
}

// A file's channel combinations, each a run of its own under
// <output_dir>/<name_of_run>: one training (a real control server and its
// endpoint file), one that failed (its end record), one not started yet.
class CtlCombinationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    top_ = dir_.path() + "/pbmc";
    const std::string running = top_ + "/vit_channel_A_B", failed = top_ + "/vit_channel_B";
    for (const auto& d : {running, failed, top_ + "/vit_channel_C"}) {
      std::filesystem::create_directories(d);
      ASSERT_TRUE(control::LoadOrCreateToken(d + "/control.token").ok());
    }
    std::ofstream(top_ + "/report.html") << "<html></html>\n";
    auto token = control::ReadToken(running + "/control.token");
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    control_.Update([](RunStatus& st) {
      st.state = RunState::kRunning;
      st.epoch = 1, st.epochs = 4, st.iteration = 10, st.iterations = 40;
    });
    server_ = ServeRun(running, *token, "pbmc/vit_channel_A_B", control_);
    ASSERT_NE(server_, nullptr);
    control::ServiceEnded ended;
    ended.service = "trainer";
    ended.state = "FAILED";
    ended.error = "out of memory";
    ended.slurm_job_id = "41_1";
    ended.exit_code = 2;
    ASSERT_TRUE(control::WriteEnded(failed, ended).ok());
  }
  int Command(std::vector<const char*> args) {
    args.insert(args.end(), {"--run-dir", top_.c_str(), "--timeout", "5"});
    const Parsed r = Execute(args);
    out_ = r.out;
    err_ = r.err;
    return *r.code;
  }
  scdino::testing::ScratchDir dir_;
  std::string top_, out_, err_;
  RunControl control_;
  std::unique_ptr<control::ControlServer> server_;
};

TEST_F(CtlCombinationsTest, StatusOnTheTopFolderListsEveryCombinationWithItsState) {
  EXPECT_EQ(CombinationsOf(top_), (std::vector<std::string>{"vit_channel_A_B", "vit_channel_B", "vit_channel_C"}));
  EXPECT_TRUE(CombinationsOf(top_ + "/vit_channel_B").empty()) << "a run's own folder is no list";
  ASSERT_EQ(Command({"status"}), kOk) << err_;
  for (const std::string row :
       {"COMBINATION                              STATE        PROGRESS\n",
        "vit_channel_A_B                          RUNNING      epoch 2/4, iteration 10/40 (25.0%)",
        "vit_channel_B                            FAILED       exit 2, Slurm job 41_1: out of memory\n",
        "vit_channel_C                            NOT RUNNING  no trainer endpoint or end record"}) {
    EXPECT_NE(out_.find(row), std::string::npos) << "no row " << row << " in\n" << out_;
  }
  EXPECT_EQ(out_.find("report.html"), std::string::npos) << out_;
  ASSERT_EQ(Command({"status", "--json"}), kOk) << err_;
  EXPECT_NE(out_.find("{\"combination\":\"vit_channel_A_B\",\"detail\":\"epoch 2/4"), std::string::npos) << out_;
  EXPECT_NE(out_.find("\"state\":\"RUN_STATE_RUNNING\""), std::string::npos) << out_;
  EXPECT_NE(out_.find("\"state\":\"FAILED\",\"status\":null}"), std::string::npos) << out_;
}

// A combination's array task that starts and ends while watch --wait waits
// for its folder (a tiny run, the folder looked for every 2 s) is reported
// from its end record: the watch began before the run did.
TEST_F(CtlCombinationsTest, WatchReportsACombinationThatStartedAndEndedWhileItsFolderWasAwaited) {
  const std::string later = top_ + "/vit_channel_D";
  std::thread run([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::filesystem::create_directories(later);
    control::ServiceEnded ended;
    ended.service = "trainer";
    ended.state = "COMPLETED";
    ended.exit_code = 0;
    ended.end_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    ASSERT_TRUE(control::WriteEnded(later, ended).ok());
  });
  const auto start = std::chrono::steady_clock::now();
  const int code = Command({"watch", "--combination", "vit_channel_D", "--wait", "30"});
  run.join();
  EXPECT_EQ(code, kOk) << err_;
  EXPECT_NE(err_.find("ended COMPLETED (exit 0)"), std::string::npos) << err_;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "the watch waited past the run's end";
  // What is left of --wait is said in whole seconds, as the user gave it.
  const auto said = err_.find("waiting up to ");
  ASSERT_NE(said, std::string::npos) << err_;
  const std::string left = err_.substr(said + 14, err_.find(" s for the run", said) - said - 14);
  EXPECT_EQ(left.find_first_not_of("0123456789"), std::string::npos) << "not whole seconds: " << left;
}

TEST_F(CtlCombinationsTest, ACommandForOneRunNamesItsCombination) {
  // Which run a stop is for is never guessed.
  EXPECT_EQ(Command({"stop"}), kBadArguments);
  EXPECT_NE(err_.find("holds the runs of 3 channel combinations (vit_channel_A_B, vit_channel_B, vit_channel_C): "
                      "name one with --combination NAME"),
            std::string::npos)
      << err_;
  EXPECT_FALSE(control_.Requests().stop);
  // By the channel names its folder ends with, or by the folder.
  ASSERT_EQ(Command({"stop", "--combination", "A_B"}), kOk) << err_;
  EXPECT_TRUE(control_.Requests().stop) << "the stop did not reach the combination's run";
  ASSERT_EQ(Command({"status", "--combination", "vit_channel_A_B"}), kOk) << err_;
  EXPECT_NE(out_.find("run         pbmc/vit_channel_A_B ("), std::string::npos) << out_;
  // "B" is vit_channel_B's, not the end of vit_channel_A_B: that run has ended.
  EXPECT_EQ(Command({"status", "--combination", "B"}), kNotFound) << out_;
  EXPECT_NE(err_.find("vit_channel_B"), std::string::npos) << err_;
  EXPECT_EQ(Command({"status", "--combination", "D"}), kNotFound);
  EXPECT_NE(err_.find("no combination D in " + top_ + "; its combinations: vit_channel_A_B, vit_channel_B, "
                      "vit_channel_C"),
            std::string::npos)
      << err_;
  // A run directory that is not there: named, exit 2 (with watch --wait,
  // a job still queued, it is waited for).
  for (const char* command : {"status", "stop"}) {
    const Parsed missing = Execute({command, "--run-dir", "/nonexistent/runs/x"});
    EXPECT_EQ(missing.code, kBadArguments) << command;
    EXPECT_NE(missing.err.find("--run-dir /nonexistent/runs/x: no such directory"), std::string::npos) << missing.err;
  }
  auto p = Parse({"status", "--combination", "B", "--target", "127.0.0.1:1", "--token-file", "t"});
  EXPECT_EQ(p.code, kBadArguments);
  EXPECT_NE(p.err.find("--combination needs --run-dir"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace scdino::ctl
