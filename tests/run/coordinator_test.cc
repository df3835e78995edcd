// How ranks meet, with ranks as threads over one store: rank 0's work
// before the others use it (and its failure reaching them), rank 0's
// requests reaching ranks that do not step together, and agreement.
#include "run/coordinator.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <mutex>
#include <thread>

namespace scdino::run {
namespace {

std::vector<std::shared_ptr<Coordinator>> Ranks(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::shared_ptr<Coordinator>> out;
  for (int r = 0; r < n; ++r) out.push_back(Coordinator::OverStore(store, r, n, timeout));
  return out;
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

}  // namespace
}  // namespace scdino::run
