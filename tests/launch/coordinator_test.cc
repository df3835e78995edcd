// How ranks meet, with ranks as threads over one store: rank 0's work
// before the others use it (and its failure reaching them), rank 0's
// requests reaching ranks that do not step together, and agreement.
#include "launch/coordinator.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/digest.h"
#include "common/torch_compat.h"
#include "launch/environment.h"
#include "support/ranks.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

using scdino::testing::Ranks;

// Every rank learns every rank's node; after a failed collective the ranks
// still there call the roll and name the ones that did not answer by node.
TEST(Coordinator, TheRollCallNamesTheLostRanksByNode) {
  auto ranks = Ranks(4);
  const std::vector<std::string> nodes{"node1", "node1", "node2", "node2"};
  std::vector<Status> named(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) threads.emplace_back([&, r] { named[r] = ranks[r]->ExchangeHosts(nodes[r]); });
  for (auto& t : threads) t.join();
  for (const auto& s : named) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ranks[3]->hosts(), nodes);
  // Ranks 2 and 3 (node2) are gone: 0 and 1 sign in and wait for them.
  std::vector<std::vector<int64_t>> lost(2);
  threads.clear();
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { lost[r] = ranks[r]->RollCall(std::chrono::milliseconds(300)); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(lost[0], (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(lost[1], (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ranks[0]->DescribeRanks(lost[0]), "node2 (ranks 2, 3)");
  EXPECT_EQ(ranks[0]->DescribeRanks({0, 3}), "node1 (rank 0) and node2 (rank 3)");
  EXPECT_EQ(ranks[0]->DescribeRanks({1, 2, 7}), "node1 (rank 1), node2 (rank 2) and rank 7");
}

TEST(Coordinator, RankZeroWorksFirstAndTheOthersSeeItsOutcome) {
  auto ranks = Ranks(3);
  std::atomic<int> written{0}, seen_before_written{0};
  std::vector<Status> results(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Status mine = Status::Ok();
      if (r == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        written = 1;
      }
      results[r] = ranks[r]->ShareOutcome("stats", mine);
      if (written.load() == 0) ++seen_before_written;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen_before_written.load(), 0) << "a rank went on before rank 0 had written";

  std::vector<Status> failed(2);
  std::thread zero([&] { failed[0] = ranks[0]->ShareOutcome("classes", Status::IOError("disk full")); });
  failed[1] = ranks[1]->ShareOutcome("classes", Status::Internal("rank 1's own outcome never counts"));
  zero.join();
  EXPECT_EQ(failed[0].code(), StatusCode::kIOError);
  ASSERT_EQ(failed[1].code(), StatusCode::kAborted);
  EXPECT_NE(failed[1].message().find("rank 0 failed at 'classes'"), std::string::npos) << failed[1].message();
  EXPECT_NE(failed[1].message().find("disk full"), std::string::npos) << failed[1].message();
}

// Rank 0 decides, every rank follows: what another rank would have found
// on its own (here: a different answer) never counts.
TEST(Coordinator, RankZeroDecidesAndEveryRankFollows) {
  auto ranks = Ranks(3);
  std::vector<StatusOr<std::string>> got(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      got[r] = ranks[r]->RankZeroDecides("rollback-1", [r]() -> StatusOr<std::string> {
        return r == 0 ? std::string("healthy") : std::string("start");
      });
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status().ToString();
    EXPECT_EQ(*got[r], "healthy") << "rank " << r;
  }
  // An empty decision is a decision too.
  std::thread zero([&] { got[0] = ranks[0]->RankZeroDecides("empty", []() -> StatusOr<std::string> { return std::string(); }); });
  got[1] = ranks[1]->RankZeroDecides("empty", []() -> StatusOr<std::string> { return std::string("mine"); });
  zero.join();
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(*got[1], "");
}

// A caller that has decided already (the plan) shares rank 0's value; what
// another rank passes never counts.
TEST(Coordinator, RankZeroSharesWhatItDecidedBeforeTheCall) {
  auto ranks = Ranks(3);
  std::vector<StatusOr<std::string>> got(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { got[r] = ranks[r]->ShareDecision("plan", "from rank " + std::to_string(r)); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status().ToString();
    EXPECT_EQ(*got[r], "from rank 0") << "rank " << r;
  }
  // One process: its own outcome, as it is.
  auto single = Coordinator::Single();
  EXPECT_EQ(single->ShareOutcome("classes", Status::IOError("disk full")).code(), StatusCode::kIOError);
  EXPECT_EQ(*single->ShareDecision("plan", std::string("mine")), "mine");
}

// A decision that throws on rank 0 is its error on every rank, not a rank
// left waiting for the timeout.
TEST(Coordinator, RankZerosThrowIsEveryRanksError) {
  auto ranks = Ranks(2);
  StatusOr<std::string> zero_got = Status::Internal("not run");
  std::thread zero([&] {
    zero_got = ranks[0]->RankZeroDecides("plan", []() -> StatusOr<std::string> { throw std::runtime_error("bad shape"); });
  });
  auto other = ranks[1]->RankZeroDecides("plan", []() -> StatusOr<std::string> { return std::string("mine"); });
  zero.join();
  EXPECT_EQ(zero_got.status().code(), StatusCode::kInternal);
  ASSERT_EQ(other.status().code(), StatusCode::kAborted);
  EXPECT_NE(other.status().message().find("bad shape"), std::string::npos) << other.status().message();
}

TEST(Coordinator, AnotherRankGivesUpWhenRankZeroNeverAnswers) {
  auto ranks = Ranks(2, std::chrono::milliseconds(300));
  auto s = ranks[1]->ShareOutcome("stats", Status::Ok());
  ASSERT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("for rank 0 to finish 'stats'"), std::string::npos) << s.message();
}

TEST(Coordinator, RequestsOfRankZeroReachTheOthers) {
  auto ranks = Ranks(2);
  EXPECT_FALSE(ranks[1]->Latest().pause);
  RunRequests r;
  r.pause = true;
  ranks[0]->Publish(r);
  EXPECT_TRUE(ranks[1]->Latest().pause);
  EXPECT_FALSE(ranks[1]->Latest().stop);
  r.pause = false;
  r.stop = true;
  ranks[0]->Publish(r);
  EXPECT_TRUE(ranks[1]->Latest().stop);
  ranks[1]->Publish(RunRequests{});  // only rank 0 publishes
  EXPECT_TRUE(ranks[1]->Latest().stop);
}

TEST(Coordinator, AgreementSetsAFlagWhenAnyRankDoes) {
  auto single = Coordinator::Single();
  Agreement a;
  a.pause = true;
  EXPECT_TRUE(single->Agree(a).pause);
  EXPECT_FALSE(single->Agree(a).stop());
  // Two ranks summing through a shared buffer, as an all-reduce does.
  auto ranks = Ranks(2);
  std::vector<double> total(kAgreementSize, 0.0);
  std::mutex mu;
  std::atomic<int> arrived{0};
  for (auto& c : ranks) {
    c->set_sum([&](std::vector<double>& v) {
      {
        std::lock_guard<std::mutex> l(mu);
        for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
      }
      ++arrived;
      while (arrived.load() < 2) std::this_thread::yield();
      v = total;
    });
  }
  Agreement zero, one;
  zero.checkpoint_by_time = true;
  one.stop_by_signal = true;
  Agreement got0, got1;
  std::thread t([&] { got1 = ranks[1]->Agree(one); });
  got0 = ranks[0]->Agree(zero);
  t.join();
  for (const auto& g : {got0, got1}) {
    EXPECT_TRUE(g.stop_by_signal);
    EXPECT_TRUE(g.checkpoint_by_time);
    EXPECT_FALSE(g.stop_by_api);
    EXPECT_FALSE(g.pause);
  }
}

// A port no one listens on now.
int64_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Whether a TCP connection to `ip`:`port` is accepted.
bool Accepts(const char* ip, int64_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// Two ranks meet over a real TCPStore at 127.0.0.1 and agree through it.
// Where LibTorch lets rank 0 bind the store's socket (2.2 on), the store
// listens on that address alone: another address of the same host
// (127.0.0.2) is refused. LibTorch 1.13's store listens on every one.
// A job over several nodes whose master name is loopback on rank 0's node
// listens everywhere, or the other nodes could never reach it.
TEST(Coordinator, RankZerosStoreListensOnTheAddressTheOtherRanksUse) {
  for (const bool spans_nodes : {false, true}) {
    SCOPED_TRACE(spans_nodes ? "ranks on two nodes" : "ranks on one node");
    LaunchInfo launch;
    launch.world_size = 2;
    launch.local_world_size = spans_nodes ? 1 : 2;
    launch.master_addr = "127.0.0.1";
    launch.master_port = FreePort();
    launch.source = "slurm";
    std::vector<std::shared_ptr<Coordinator>> ranks(2);
    std::vector<Status> connected(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        LaunchInfo mine = launch;
        mine.rank = r;
        auto c = Coordinator::Connect(mine, std::chrono::seconds(20), std::string(64, 'a'));
        connected[r] = c.status();
        if (c.ok()) ranks[r] = *c;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(connected[0].ok() && connected[1].ok()) << connected[0].ToString() << connected[1].ToString();
    EXPECT_TRUE(Accepts("127.0.0.1", launch.master_port));
    const bool everywhere = spans_nodes || !compat::kStoreTakesListeningSocket;
    EXPECT_EQ(Accepts("127.0.0.2", launch.master_port), everywhere) << "LibTorch " << compat::TorchVersion();
    std::thread zero([&] { EXPECT_TRUE(ranks[0]->ShareOutcome("stats", Status::Ok()).ok()); });
    EXPECT_TRUE(ranks[1]->ShareOutcome("stats", Status::Ok()).ok());
    zero.join();
    ranks[1].reset();
    ranks[0].reset();
  }
}

// Another user's process that took a job's rendezvous port before rank 0:
// it listens on 127.0.0.1:`port`, forwards every connection to a store of
// its own at `to`, and records what the job's ranks send it.
class Squatter {
 public:
  Squatter(int64_t port, int64_t to) : to_(to) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(listen_, 16), 0);
    accepting_ = std::thread([this] { Accept(); });
  }
  ~Squatter() {
    stop_ = true;
    accepting_.join();
    for (auto& t : pumps_) t.join();
    ::close(listen_);
  }
  std::string heard() {
    std::lock_guard<std::mutex> lock(mu_);
    return heard_;
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(listen_, nullptr, nullptr);
      if (client < 0) continue;
      const int store = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(to_));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(store, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(client);
        ::close(store);
        continue;
      }
      pumps_.emplace_back([this, client, store] { Pump(client, store); });
    }
  }
  static bool WriteAll(int fd, const char* p, ssize_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, static_cast<size_t>(n));
      if (w <= 0) return false;
      p += w;
      n -= w;
    }
    return true;
  }
  void Pump(int client, int store) {
    char buf[4096];
    while (!stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {store, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents != 0) {
        const ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          heard_.append(buf, static_cast<size_t>(n));
        }
        if (!WriteAll(store, buf, n)) break;
      }
      if (p[1].revents != 0) {
        const ssize_t n = ::read(store, buf, sizeof buf);
        if (n <= 0 || !WriteAll(client, buf, n)) break;
      }
    }
    ::close(client);
    ::close(store);
  }

  int64_t to_;
  int listen_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accepting_;
  std::vector<std::thread> pumps_;
  std::mutex mu_;
  std::string heard_;
};

// A synthetic run's config whose run directory (in `dir`) is prepared.
StatusOr<RunConfig> PreparedRunConfig(const scdino::testing::ScratchDir& dir) {
  auto config = ParseRunConfig("meta: {name_of_run: r, output_dir: \"" + dir.path() +
                                   "\", selected_channel_combination_per_run: [\"012\"]}\n"
                                   "scdino: {data_source: synthetic}\n",
                               "cfg.yaml");
  if (!config.ok()) return config;
  if (Status s = PrepareRunDir(*config); !s.ok()) return s;
  return config;
}

// A squatter that took the job's only rendezvous port (MASTER_PORT given)
// and serves a store of its own, claiming this attempt (its id is public)
// and holding a mark for rank 0 at the old public name (replayed from
// another run): rank 1 refuses it, and sends nothing of its own before rank
// 0's mark is proven, so the squatter hears no mark, no secret, no key of
// the job; rank 0, unable to serve the rendezvous, replaces the secret and
// ends as a lost peer (requeued, on other ports), and another attempt's
// keys share nothing with this one's.
TEST(Coordinator, ASquatterOnTheRendezvousPortLearnsNothingOfUse) {
  scdino::testing::ScratchDir dir;
  auto config = PreparedRunConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto secret = RendezvousSecret(*config);
  ASSERT_TRUE(secret.ok());
  auto own = compat::TcpStoreOptions();
  own.port = static_cast<uint16_t>(FreePort());
  own.isServer = true;
  own.waitWorkers = false;
  own.timeout = std::chrono::seconds(20);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", own);
  store->set("scdino-rundir/0", std::vector<uint8_t>(32, 'f'));
  LaunchInfo launch;
  launch.world_size = 2;
  launch.local_world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = FreePort();
  launch.source = "slurm";
  launch.attempt = "slurm job 7 step 0 restart 0 at 127.0.0.1:" + std::to_string(launch.master_port);
  const std::string id = Sha256Hex("scdino-attempt\n" + launch.attempt).substr(0, 32);
  store->set("scdino-attempt", std::vector<uint8_t>(id.begin(), id.end()));
  Squatter squatter(launch.master_port, own.port);
  LaunchInfo one = launch;
  one.rank = 1;
  auto c1 = Coordinator::Connect(one, std::chrono::seconds(3), *secret);
  ASSERT_FALSE(c1.ok()) << "rank 1 took another run's mark for rank 0's";
  EXPECT_EQ(c1.status().code(), StatusCode::kFailedPrecondition) << c1.status().ToString();
  EXPECT_NE(c1.status().message().find("does not hold this run's rendezvous.secret"), std::string::npos)
      << c1.status().message();
  EXPECT_NE(c1.status().message().find("or another process holds the port"), std::string::npos);
  const std::string heard = squatter.heard();
  EXPECT_NE(heard.find("scdino-marks-"), std::string::npos) << "rank 1 asked for rank 0's mark";
  EXPECT_EQ(heard.find("/1"), std::string::npos) << "the squatter heard rank 1's mark";
  EXPECT_EQ(heard.find(*secret), std::string::npos) << "the squatter heard the run's secret";
  EXPECT_EQ(heard.find("scdino-job-"), std::string::npos) << "the squatter heard a key of the job";

  // Rank 0 cannot listen on the port: the secret is replaced.
  LaunchInfo zero = launch;
  zero.rank = 0;
  auto c0 = Rendezvous(*config, zero, std::chrono::seconds(3));
  ASSERT_FALSE(c0.ok());
  EXPECT_EQ(c0.status().code(), StatusCode::kPeerLost) << c0.status().ToString();
  EXPECT_NE(c0.status().message().find("the job is requeued"), std::string::npos) << c0.status().message();
  auto fresh = RendezvousSecret(*config);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(*fresh, *secret);
  // Each attempt's keys under a prefix of its own.
  const std::string prefix = AttemptPrefix(*secret, launch.attempt);
  EXPECT_EQ(prefix.size(), 32u);
  EXPECT_NE(prefix, AttemptPrefix(*secret, "slurm job 7 step 0 restart 1 at 127.0.0.1:" +
                                               std::to_string(launch.master_port)));
  EXPECT_NE(prefix, AttemptPrefix(*fresh, launch.attempt));
}

// Two ranks of one attempt, as threads; their Status and where rank 0 served.
struct Met {
  std::vector<Status> status = std::vector<Status>(2);
  std::vector<std::shared_ptr<Coordinator>> ranks = std::vector<std::shared_ptr<Coordinator>>(2);
};
Met MeetTwoRanks(const LaunchInfo& launch, const std::string& secret, std::chrono::milliseconds timeout) {
  Met m;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      LaunchInfo mine = launch;
      mine.rank = r;
      auto c = Coordinator::Connect(mine, timeout, secret);
      m.status[static_cast<size_t>(r)] = c.status();
      if (c.ok()) m.ranks[static_cast<size_t>(r)] = *c;
    });
  }
  for (auto& t : threads) t.join();
  return m;
}

LaunchInfo TwoRankLaunch(const std::string& attempt, std::vector<int64_t> ports) {
  LaunchInfo launch;
  launch.world_size = 2;
  launch.local_world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = ports[0];
  launch.port_candidates = std::move(ports);
  launch.source = "slurm";
  launch.attempt = attempt;
  return launch;
}

// A process of another user holds the first port of the attempt's
// sequence (it accepts and never answers): rank 0 serves on the next one,
// the other rank passes the silent one by (on LibTorch 2.x, whose store
// client would wait on it for ever, by asking in the store's protocol
// first), finds rank 0 there, and the ranks work together.
TEST(Coordinator, ASquatterOnTheFirstPortMovesTheRendezvousToTheNext) {
  const int64_t taken = FreePort();
  const int squatter = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(taken));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(squatter, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(squatter, 16), 0);
  const std::vector<int64_t> ports = {taken, FreePort(), FreePort()};
  auto m = MeetTwoRanks(TwoRankLaunch("slurm job 9 step 0 restart 0 at 127.0.0.1:" + std::to_string(taken), ports),
                        std::string(64, 's'), std::chrono::seconds(60));
  ::close(squatter);
  ASSERT_TRUE(m.status[0].ok() && m.status[1].ok()) << m.status[0].ToString() << " | " << m.status[1].ToString();
  EXPECT_TRUE(Accepts("127.0.0.1", ports[1])) << "rank 0 serves on the second port";
  EXPECT_EQ(m.ranks[0]->port(), ports[1]) << "the port the ranks say they met on";
  EXPECT_EQ(m.ranks[1]->port(), ports[1]);
  std::thread zero([&] { EXPECT_TRUE(m.ranks[0]->ShareOutcome("stats", Status::Ok()).ok()); });
  EXPECT_TRUE(m.ranks[1]->ShareOutcome("stats", Status::Ok()).ok());
  zero.join();
}

// A rank whose node has another run directory (node-local storage) holds
// another secret: rank 0's store serves this attempt, so the rank says so
// at once, not after the timeout, whatever the port sequence holds.
TEST(Coordinator, ARankOfThisAttemptWithAnotherSecretIsRefusedAtOnce) {
  const std::vector<int64_t> ports = {FreePort(), FreePort()};
  const LaunchInfo launch = TwoRankLaunch("slurm job 31 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports);
  std::thread zero([&] {
    LaunchInfo mine = launch;
    mine.rank = 0;
    (void)Coordinator::Connect(mine, std::chrono::seconds(6), std::string(64, 'x'));
  });
  LaunchInfo one = launch;
  one.rank = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto c1 = Coordinator::Connect(one, std::chrono::seconds(60), std::string(64, 'y'));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  zero.join();
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().code(), StatusCode::kFailedPrecondition) << c1.status().ToString();
  EXPECT_NE(c1.status().message().find("this node's run directory is not the one rank 0"), std::string::npos)
      << c1.status().message();
  EXPECT_LT(seconds, 30.0) << "refused after the timeout (60 s), not at once";
}

// A stop signal while the ranks wait for each other (scancel, a time limit
// before every node came up) ends the wait within seconds, on rank 0
// waiting for a rank that never comes and on a rank waiting for a rank 0
// that never comes; Rendezvous does not try again after it. It ends
// Unavailable (exit 1: nothing was saved), not Aborted (75): a step srun
// cancels because a peer was refused must end with that peer's code (a
// node-local run directory: 2), not a requeue.
TEST(Coordinator, AStopEndsTheWaitOnBothSidesAndIsNotTriedAgain) {
  for (int64_t rank : {0, 1}) {
    const std::vector<int64_t> ports = {FreePort()};
    LaunchInfo mine = TwoRankLaunch("slurm job 41 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports);
    mine.rank = rank;
    std::atomic<bool> stop{false};
    std::thread signal([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      stop = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Coordinator::Connect(mine, std::chrono::seconds(120), std::string(64, 'z'), [&] { return stop.load(); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    signal.join();
    ASSERT_FALSE(c.ok()) << "rank " << rank;
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
    EXPECT_NE(c.status().message().find("rank " + std::to_string(rank) + " of 2: stopped by a signal during the "
                                        "rendezvous"),
              std::string::npos)
        << c.status().message();
    EXPECT_NE(c.status().message().find("nothing was done yet"), std::string::npos) << c.status().message();
    EXPECT_GE(seconds, 1.4) << "rank " << rank;
    EXPECT_LT(seconds, 15.0) << "rank " << rank << ": waited on after the stop (timeout 120 s)";
  }
  // Rendezvous: a rank silent past the timeout is tried once more (2 s
  // again), unless a stop came meanwhile.
  scdino::testing::ScratchDir dir;
  auto config = PreparedRunConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const std::vector<int64_t> ports = {FreePort()};
  LaunchInfo zero = TwoRankLaunch("slurm job 42 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports);
  zero.rank = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto c = Rendezvous(*config, zero, std::chrono::seconds(2),
                      [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(1950); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
  EXPECT_LT(seconds, 3.5) << "tried again after the stop";
}

// Two jobs whose sequences start on the same port (two scdino runs on one
// first node): the job there first keeps it; the other's rank 0 moves on,
// and its rank 1, meeting the first job's store, refuses it (another
// secret) and never joins it: each job's ranks meet their own rank 0.
TEST(Coordinator, TwoJobsOnTheSamePortsNeverJoinEachOthersStore) {
  const std::vector<int64_t> ports = {FreePort(), FreePort(), FreePort()};
  // Job A's rank 0 alone: its rank 1 never comes, it serves on ports[0]
  // meanwhile.
  std::thread a_zero([&] {
    LaunchInfo a = TwoRankLaunch("slurm job 100 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports);
    auto c = Coordinator::Connect(a, std::chrono::seconds(8), std::string(64, 'A'));
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
    EXPECT_NE(c.status().message().find("rank 1 of 2 did not join the rendezvous"), std::string::npos)
        << c.status().message();
  });
  for (int i = 0; i < 100 && !Accepts("127.0.0.1", ports[0]); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(Accepts("127.0.0.1", ports[0]));
  auto m = MeetTwoRanks(TwoRankLaunch("slurm job 12100 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports),
                        std::string(64, 'B'), std::chrono::seconds(30));
  ASSERT_TRUE(m.status[0].ok() && m.status[1].ok()) << m.status[0].ToString() << " | " << m.status[1].ToString();
  std::thread zero([&] { EXPECT_TRUE(m.ranks[0]->ShareOutcome("stats", Status::Ok()).ok()); });
  EXPECT_TRUE(m.ranks[1]->ShareOutcome("stats", Status::Ok()).ok());
  zero.join();
  a_zero.join();
}

// Another user on the node can reach the store, which authenticates
// nobody: a mark for rank 1 forged at the old public name, and a client that
// sends the first bytes of a message and then nothing (the classic store
// server reads a message with blocking reads: it held the server, and every
// rank, for ever). Rank 0 ignores the forged mark (its ranks' marks live
// under a name only the secret gives), the half-sent client is dropped
// after a bound, and the two ranks meet and work together.
TEST(Coordinator, AForgedMarkAndAHalfSentMessageNeverEndTheRendezvous) {
  const std::vector<int64_t> ports = {FreePort()};
  const LaunchInfo launch = TwoRankLaunch("slurm job 61 step 0 restart 0 at 127.0.0.1:" + std::to_string(ports[0]), ports);
  const std::string secret(64, 'k');
  Met m;
  std::thread zero([&] {
    LaunchInfo mine = launch;
    mine.rank = 0;
    auto c = Coordinator::Connect(mine, std::chrono::seconds(40), secret);
    m.status[0] = c.status();
    if (c.ok()) m.ranks[0] = *c;
  });
  for (int i = 0; i < 200 && !Accepts("127.0.0.1", ports[0]); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(Accepts("127.0.0.1", ports[0]));
  // The forger: a store client writing a mark for rank 1 where the old code read it.
  {
    auto o = compat::TcpStoreOptions();
    o.port = static_cast<uint16_t>(ports[0]);
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = std::chrono::seconds(10);
    auto forger = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    forger->set("scdino-rundir/1", std::vector<uint8_t>(32, 'z'));
  }
  // The half-sent message: one byte of a query, then silence, the connection held open.
  const int half = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(ports[0]));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(half, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  const char first_byte = 0;
  ASSERT_EQ(::send(half, &first_byte, 1, MSG_NOSIGNAL), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server is in its read now
  LaunchInfo one = launch;
  one.rank = 1;
  auto c1 = Coordinator::Connect(one, std::chrono::seconds(30), secret);
  m.status[1] = c1.status();
  if (c1.ok()) m.ranks[1] = *c1;
  zero.join();
  ::close(half);
  ASSERT_TRUE(m.status[0].ok() && m.status[1].ok()) << m.status[0].ToString() << " | " << m.status[1].ToString();
  std::thread z([&] { EXPECT_TRUE(m.ranks[0]->ShareOutcome("stats", Status::Ok()).ok()); });
  EXPECT_TRUE(m.ranks[1]->ShareOutcome("stats", Status::Ok()).ok());
  z.join();
}

// A rank whose rank 0 never serves (its node lost, a store silent past the
// bound) says so, tries once more, and ends as a lost peer: the batch
// scripts requeue it (exit 9), where it used to end 1.
TEST(Coordinator, ARendezvousSilentPastItsBoundIsTriedOnceMoreThenRequeued) {
  scdino::testing::ScratchDir dir;
  auto config = PreparedRunConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  LaunchInfo one = TwoRankLaunch("slurm job 62 step 0 restart 0 at 127.0.0.1", {FreePort()});
  one.rank = 1;
  const auto t0 = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  auto c1 = Rendezvous(*config, one, std::chrono::seconds(2));
  const std::string said = ::testing::internal::GetCapturedStderr();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().code(), StatusCode::kPeerLost) << c1.status().ToString();
  EXPECT_NE(c1.status().message().find("(a second time): the job is requeued"), std::string::npos)
      << c1.status().message();
  EXPECT_NE(said.find("trying once more (2 s)"), std::string::npos) << said;
  EXPECT_GE(seconds, 4.0) << "two bounds of 2 s";
}

TEST(ListenOn, NamesTheHostItCannotResolveAndSaysWhatIsLoopback) {
  auto bad = ListenOn("no-such-host.invalid", FreePort());
  ASSERT_EQ(bad.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("cannot resolve no-such-host.invalid"), std::string::npos)
      << bad.status().message();
  auto l = ListenOn("127.0.0.1", FreePort());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->loopback);
  EXPECT_EQ(l->address, "127.0.0.1");
  auto taken = ListenOn("127.0.0.1", [&] {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    ::getsockname(l->fd, reinterpret_cast<sockaddr*>(&a), &len);
    return static_cast<int64_t>(ntohs(a.sin_port));
  }());
  ASSERT_EQ(taken.status().code(), StatusCode::kAlreadyExists) << "in use: the rendezvous moves to its next port";
  EXPECT_NE(taken.status().message().find("cannot listen on 127.0.0.1:"), std::string::npos)
      << taken.status().message();
  ::close(l->fd);
}

}  // namespace
}  // namespace scdino::run
