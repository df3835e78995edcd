// The CPU products (cpu_gemm.h) against LibTorch's own ops: what the build
// linked is what serves them, the run-time switch sends everything back to
// LibTorch, every transposition, and the products on two threads (the CI
// machine's cores; scripts/test.sh runs the other tests on one), with the
// per-head work really spread over both (the attention core on two threads:
// attention_core_test.cc), and stop signals during the products.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "model/attention_core.h"
#include "model/cpu_gemm.h"
#include "model/linear.h"
#include "process/exit_codes.h"
#include "process/signals.h"
#include "support/test_support.h"

namespace scdino::model {
namespace {

using testing::ExpectCloseToScale;

TEST(CpuGemm, WhatTheBuildLinkedServesTheProducts) {
  const CpuGemmLibraries linked = LinkedCpuGemm();
  const std::string d = CpuGemmDescription();
  EXPECT_EQ(HasCpuGemm(), linked.onednn || linked.openblas) << d;
  // Per-head products only through oneDNN sharing LibTorch's OpenMP threads.
  if (HasPairGemm()) {
    EXPECT_TRUE(linked.onednn) << d;
  }
  EXPECT_EQ(d.find("oneDNN") != std::string::npos, linked.onednn) << d;
  EXPECT_EQ(d.find("OpenBLAS") != std::string::npos, linked.openblas) << d;
  EXPECT_EQ(d.find("LibTorch's own ops") != std::string::npos, !linked.onednn && !linked.openblas) << d;
  EXPECT_EQ(CpuGemmApplies(torch::randn({2, 3}), torch::randn({3, 4})), HasCpuGemm());
}

TEST(CpuGemm, SwitchedOffEveryProductIsLibTorchs) {
  ScopedCpuGemm off(false);
  EXPECT_FALSE(HasCpuGemm());
  EXPECT_FALSE(HasPairGemm());
  auto a = torch::randn({5, 7}), b = torch::randn({7, 3});
  EXPECT_FALSE(CpuGemmApplies(a, b));
  EXPECT_FALSE(CpuLinearApplies(a, torch::randn({4, 7}), torch::randn({4})));
  EXPECT_FALSE(CpuAttentionApplies(torch::randn({2, 5, 24})));
  EXPECT_TRUE(torch::equal(Mm(a, false, b, false), torch::mm(a, b)));
  EXPECT_NE(CpuGemmDescription().find("scdino.cpu_gemm off"), std::string::npos) << CpuGemmDescription();
  EXPECT_THROW(CpuGemm(false, false, 5, 3, 7, 1.f, a.data_ptr<float>(), 7, b.data_ptr<float>(), 3, 0.f,
                       torch::empty({5, 3}).data_ptr<float>(), 3),
               c10::Error);
}

TEST(CpuGemm, MmEqualsTorchMmForEveryTransposition) {
  torch::manual_seed(5);
  const int64_t M = 37, N = 53, K = 300;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = ta ? torch::randn({K, M}) : torch::randn({M, K});
      auto b = tb ? torch::randn({N, K}) : torch::randn({K, N});
      const std::string what = std::string("op(a)") + (ta ? "^T" : "") + " op(b)" + (tb ? "^T" : "");
      ExpectCloseToScale(Mm(a, ta, b, tb), torch::mm(ta ? a.t() : a, tb ? b.t() : b), what);
    }
  }
  // A non-contiguous operand (a column slice) and an empty inner size.
  auto wide = torch::randn({M, 2 * K});
  auto b = torch::randn({K, N});
  ExpectCloseToScale(Mm(wide.slice(1, 0, K), false, b, false), torch::mm(wide.slice(1, 0, K), b), "sliced a");
  EXPECT_TRUE(torch::equal(Mm(torch::randn({M, 0}), false, torch::randn({0, N}), false), torch::zeros({M, N})));
}

// A library failure is an error naming the product, also from inside a
// parallel region (the per-head products): here a row stride shorter than
// the row, which oneDNN refuses.
TEST(CpuGemm, ALibraryFailureIsAnErrorNamingTheProduct) {
  if (!HasPairGemm()) GTEST_SKIP() << "no calling-thread product in this build: " << CpuGemmDescription();
  auto a = torch::randn({4, 8}), b = torch::randn({8, 4}), c = torch::empty({4, 4});
  try {
    ForEachInParallel(4, [&](int64_t) {
      PairGemm(false, false, 4, 4, 8, 1.f, a.data_ptr<float>(), 2, b.data_ptr<float>(), 4, 0.f, c.data_ptr<float>(),
               4);
    });
    ADD_FAILURE() << "a product with lda 2 < K 8 did not fail";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("PairGemm: oneDNN's dnnl_sgemm failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("K 8"), std::string::npos) << e.what();
  }
}

class TwoThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    was_ = torch::get_num_threads();
    torch::set_num_threads(2);
  }
  void TearDown() override { torch::set_num_threads(was_); }
  int was_ = 1;
};

TEST_F(TwoThreads, PerHeadWorkRunsOnBothThreads) {
  ASSERT_EQ(torch::get_num_threads(), 2);
  std::mutex m;
  std::set<std::thread::id> threads;
  ForEachInParallel(16, [&](int64_t) {
    std::lock_guard<std::mutex> lock(m);
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(threads.size(), 2u);
}

TEST_F(TwoThreads, ProductsEqualLibTorchsOps) {
  torch::manual_seed(11);
  // Shapes of the step: tokens x width by the qkv and MLP weights, and the
  // weight gradient's deep sum over tokens.
  auto x = torch::randn({394, 192}), w = torch::randn({576, 192}), dy = torch::randn({394, 576});
  // Without a GEMM library Mm and Linear are LibTorch's own ops: nothing
  // here could differ.
  if (!CpuGemmApplies(x, w)) GTEST_SKIP() << "no CPU GEMM library in this build: " << CpuGemmDescription();
  ExpectCloseToScale(Mm(x, false, w, true), torch::mm(x, w.t()), "x w^T");
  ExpectCloseToScale(Mm(dy, true, x, false), torch::mm(dy.t(), x), "dy^T x");
  ExpectCloseToScale(Mm(dy, false, w, false), torch::mm(dy, w), "dy w");
  auto xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true);
  auto b = torch::randn({576}).requires_grad_(true);
  auto grad = torch::randn({394, 576});
  auto fast = Linear(xg, wg, b);
  fast.backward(grad);
  auto gx = xg.grad().clone(), gw = wg.grad().clone();
  xg.mutable_grad() = torch::Tensor();
  wg.mutable_grad() = torch::Tensor();
  torch::linear(xg, wg, b).backward(grad);
  ExpectCloseToScale(gx, xg.grad(), "linear input gradient");
  ExpectCloseToScale(gw, wg.grad(), "linear weight gradient");
}

// The heap corruption that ended preempted steps ("corrupted size vs.
// prev_size", a segfault in unlink_chunk right after "signal received"):
// oneDNN's JIT sgemm runs with its stack pointer in the heap, so a signal
// handled on the thread running it writes its frame into the heap. The stop
// signals are handled on a thread of their own (process/signals.h): stop
// signals every 100 us during 300 x 300 x 300 products on this thread leave
// them exact and the heap whole (handled here, they corrupt it within a
// second). In a child process; the shutdown state makes each signal print.
TEST(CpuGemm, AStormOfStopSignalsLeavesTheProductsAndTheHeapIntact) {
  if (!HasCpuGemm()) GTEST_SKIP() << "no CPU matrix library linked: " << CpuGemmDescription();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto storm = [] {
    process::InstallStopSignals("scdino-x", "finishing the step");
    process::MarkShuttingDown(process::kExitPreempted, 20);
    at::set_num_threads(1);  // the products on this thread (where oneDNN then picks the kernel that fails)
    constexpr int n = 300;
    std::atomic<bool> done{false};
    std::thread sender([&] {
      while (!done.load()) {
        ::kill(::getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    int wrong = 0;
    for (int round = 0; round < 200; ++round) {
      std::vector<float> a(n * n, 1.f), b(n * n, 1.f), c(n * n, 0.f);
      std::vector<std::vector<char>> small;  // heap traffic next to the products
      for (int i = 0; i < 64; ++i) small.emplace_back(100 + 37 * i);
      CpuGemm(false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      for (float v : c) wrong += v != static_cast<float>(n);
    }
    done.store(true);
    sender.join();
    std::cerr << "products wrong: " << wrong << ", signals: " << process::StopSignalsHandled() << "\n";
    std::_Exit(wrong == 0 && process::StopSignalsHandled() > 10 ? 0 : 1);
  };
  EXPECT_EXIT(storm(), ::testing::ExitedWithCode(0), "products wrong: 0, signals: [0-9]+");
}

}  // namespace
}  // namespace scdino::model
