// How ranks meet, with ranks as threads over one store: rank 0's work
// before the others use it (and its failure reaching them), rank 0's
// requests reaching ranks that do not step together, and agreement.
#include "run/coordinator.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/torch_compat.h"

namespace scdino::run {
namespace {

std::vector<std::shared_ptr<Coordinator>> Ranks(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::shared_ptr<Coordinator>> out;
  for (int r = 0; r < n; ++r) out.push_back(Coordinator::OverStore(store, r, n, timeout));
  return out;
}

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
      results[r] = ranks[r]->RankZeroFirst("stats", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        written = 1;
        return Status::Ok();
      });
      if (written.load() == 0) ++seen_before_written;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen_before_written.load(), 0) << "a rank went on before rank 0 had written";

  std::vector<Status> failed(2);
  std::thread zero([&] { failed[0] = ranks[0]->RankZeroFirst("classes", [] { return Status::IOError("disk full"); }); });
  failed[1] = ranks[1]->RankZeroFirst("classes", [] { return Status::Internal("rank 1 must not work"); });
  zero.join();
  EXPECT_EQ(failed[0].code(), StatusCode::kIOError);
  ASSERT_EQ(failed[1].code(), StatusCode::kAborted);
  EXPECT_NE(failed[1].message().find("rank 0 failed at 'classes'"), std::string::npos) << failed[1].message();
  EXPECT_NE(failed[1].message().find("disk full"), std::string::npos) << failed[1].message();
}

TEST(Coordinator, AnotherRankGivesUpWhenRankZeroNeverAnswers) {
  auto ranks = Ranks(2, std::chrono::milliseconds(300));
  auto s = ranks[1]->RankZeroFirst("stats", [] { return Status::Ok(); });
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
    std::thread zero([&] { EXPECT_TRUE(ranks[0]->RankZeroFirst("stats", [] { return Status::Ok(); }).ok()); });
    EXPECT_TRUE(ranks[1]->RankZeroFirst("stats", [] { return Status::Ok(); }).ok());
    zero.join();
    ranks[1].reset();
    ranks[0].reset();
  }
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
  ASSERT_EQ(taken.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find("cannot listen on 127.0.0.1:"), std::string::npos)
      << taken.status().message();
  ::close(l->fd);
}

}  // namespace
}  // namespace scdino::run
