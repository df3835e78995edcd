// The step benchmark's counter (common/op_count.h): what it counts as an
// operator call and as a host synchronisation, on which thread.
#include "common/op_count.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

namespace scdino {
namespace {

TEST(OpCounter, CountsEveryDispatchedCallNestedOnesIncluded) {
  const auto a = torch::ones({4}), b = torch::ones({4});
  OpCounter counter;
  auto c = a + b;
  auto counts = counter.Take();
  EXPECT_GE(counts.ops, 1);
  EXPECT_EQ(counts.by_name["aten::add"], 1);
  EXPECT_EQ(counts.host_syncs, 0);
  // A call that calls others: all of them (clone calls empty_like and copy_).
  c = a.clone();
  counts = counter.Take();
  EXPECT_EQ(counts.by_name["aten::clone"], 1);
  EXPECT_GE(counts.by_name["aten::copy_"], 1);
  EXPECT_GT(counts.ops, 2);
  // Take starts afresh.
  EXPECT_EQ(counter.Take().ops, 0);
}

TEST(OpCounter, AReadOnTheHostAndAMarkedWaitAreSyncs) {
  const auto a = torch::ones({4});
  OpCounter counter;
  (void)a.sum().item<float>();
  if (a.sum().gt(0).item<bool>()) {
  }
  {
    HostWaitScope wait;
  }
  const auto counts = counter.Take();
  EXPECT_EQ(counts.host_syncs, 3);
  EXPECT_EQ(counts.syncs_by_name.at("aten::_local_scalar_dense"), 2);
  EXPECT_EQ(counts.syncs_by_name.at("scdino::host_wait"), 1);
}

TEST(OpCounter, OtherThreadsAreCountedApartAndOneCounterAtATime) {
  OpCounter counter;
  std::thread([] { (void)torch::ones({2}).sum().item<float>(); }).join();
  const auto counts = counter.Take();
  EXPECT_EQ(counts.ops, counts.other_thread_ops);
  EXPECT_GT(counts.other_thread_ops, 0);
  EXPECT_EQ(counts.other_thread_syncs, 1);
  EXPECT_THROW(OpCounter second, c10::Error);
}

TEST(OpCounter, CallsInsideTheCpuBmmAreCountedApart) {
  const auto a = torch::randn({6, 8, 8}), b = torch::randn({6, 8, 8});
  OpCounter counter;
  auto c = torch::bmm(a, b);
  const auto counts = counter.Take();
  EXPECT_EQ(counts.by_name.at("aten::bmm"), 1);
  // Every call but the bmm itself is inside it (LibTorch 1.13 loops over
  // the six matrices there).
  EXPECT_EQ(counts.ops - counts.inside_cpu_bmm, 1);
}

}  // namespace
}  // namespace scdino
