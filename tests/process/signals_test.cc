// The stop signals: installed with SA_RESTART, routed to the registered
// flag only while it lives, and handled on a thread of their own, never on
// a thread that computes (what that prevents: cpu_gemm_test.cc,
// CpuGemm.AStormOfStopSignalsLeavesTheProductsAndTheHeapIntact).
#include "process/signals.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "support/stop_signals.h"

namespace scdino::process {
namespace {

using scdino::testing::SendStopSignal;

bool Blocks(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

// Interrupted system calls resume (SA_RESTART): a read in a library that
// does not retry on EINTR is not failed by the signal.
TEST(StopSignals, AreInstalledWithSaRestart) {
  InstallStopSignals("scdino-x", "finishing the batch");
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) {
    struct sigaction now {};
    ASSERT_EQ(::sigaction(sig, nullptr, &now), 0);
    EXPECT_TRUE(now.sa_flags & SA_RESTART) << "signal " << sig;
  }
}

// The thread that installs them, and the threads it starts afterwards
// (LibTorch's OpenMP workers, the loaders), block them; the signal is still
// handled, on the signal thread.
TEST(StopSignals, AreHandledOnTheirOwnThreadNeverOnOnesThatCompute) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto install_and_signal = [] {
    InstallStopSignals("scdino-x", "finishing the batch");
    bool blocked = Blocks(SIGTERM) && Blocks(SIGUSR1) && Blocks(SIGINT);
    std::thread([&] { blocked = blocked && Blocks(SIGTERM) && Blocks(SIGUSR1) && Blocks(SIGINT); }).join();
    if (!blocked) {
      std::cerr << "a stop signal is not blocked on the installing thread or one it started\n";
      std::_Exit(1);
    }
    if (!SendStopSignal(SIGINT)) {
      std::cerr << "no thread handled the signal within 5 s\n";
      std::_Exit(1);
    }
    std::_Exit(StopSignalReceived() ? 0 : 1);
  };
  EXPECT_EXIT(install_and_signal(), ::testing::ExitedWithCode(0), "^scdino-x: signal received: finishing the batch\n$");
}

// The registration is cleared when its scope ends, also by an exception, so
// a signal in a shutdown window never reaches a destroyed trainer.
TEST(StopSignals, TheFirstSignalSetsTheRegisteredFlagOnlyWhileItLives) {
  InstallStopSignals("scdino-x", "finishing the batch");
  EXPECT_FALSE(StopSignalReceived());
  std::atomic<bool> flag{false};
  try {
    ScopedStopFlag route(&flag);
    EXPECT_EQ(RegisteredStopFlagForTesting(), &flag);
    throw std::runtime_error("a peer died");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(RegisteredStopFlagForTesting(), nullptr);
  std::atomic<bool> live{false};
  ScopedStopFlag route(&live);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(SendStopSignal(SIGUSR1));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(StopSignalReceived());
  EXPECT_TRUE(live.load());
  EXPECT_FALSE(flag.load());
  EXPECT_EQ(said, "scdino-x: signal received: finishing the batch\n");
  // A registration after the signal is stopped at once.
  std::atomic<bool> late{false};
  ScopedStopFlag again(&late);
  EXPECT_TRUE(late.load());
}

}  // namespace
}  // namespace scdino::process
