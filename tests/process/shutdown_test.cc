// The end of a service process: what each stop signal does before and
// during the ordered shutdown, the stages run in order on the main thread
// while another thread still works, and the watchdog that bounds a stage
// that hangs. Each case runs in a child process (a death test): signal
// state and _exit are the process's.
#include "process/shutdown.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "process/exit_codes.h"
#include "process/signals.h"
#include "support/stop_signals.h"

namespace scdino::process {
namespace {

using scdino::testing::SendStopSignal;
using std::chrono::milliseconds;

class Shutdown : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The second signal only says that the stop is under way: srun sends one to
// every task left once the first task of a stopped step has exited, and a
// task still writing its part of the checkpoint must finish it.
TEST_F(Shutdown, ASecondSignalLetsTheStopFinish) {
  auto two_signals_then_exit = [] {
    InstallStopSignals("scdino-x", "finishing the step");
    std::atomic<bool> flag{false};
    ScopedStopFlag route(&flag);
    if (!SendStopSignal(SIGTERM) || !SendStopSignal(SIGTERM) || !flag.load()) std::_Exit(9);
    EndProcess("scdino-x", kExitPreempted);
  };
  EXPECT_EXIT(two_signals_then_exit(), ::testing::ExitedWithCode(kExitPreempted),
              "signal received: finishing the step\n"
              "scdino-x: another signal: the stop is under way \\(finishing the step\\); a third signal exits at once");
}

// A third signal ends the process at once: with 75 once the stop's
// checkpoint is saved (every rank then reports the preemption alike), else
// with 1 (the last complete checkpoint stays).
TEST_F(Shutdown, AThirdSignalExitsAtOnceWith75OnlyOnceTheStopIsSaved) {
  auto three = [](bool saved) {
    InstallStopSignals("scdino-x", "finishing the step");
    if (saved) MarkStopSaved();
    for (int i = 0; i < 3; ++i) (void)SendStopSignal(SIGUSR1);
    std::_Exit(9);  // not reached
  };
  EXPECT_EXIT(three(false), ::testing::ExitedWithCode(kExitFailed),
              "third signal: exiting now without saving at the stop \\(1\\)");
  EXPECT_EXIT(three(true), ::testing::ExitedWithCode(kExitPreempted), "third signal: exiting now \\(75;");
}

// During the shutdown no signal ends the process, however many come: the
// shutdown ends with the code already decided.
TEST_F(Shutdown, SignalsDuringTheShutdownOnlyPrint) {
  auto signalled_shutdown = [] {
    InstallStopSignals("scdino-x", "finishing the step");
    if (!SendStopSignal(SIGTERM)) std::_Exit(9);
    MarkStopSaved();
    EndProcess("scdino-x", kExitPreempted,
               {{"the loader", [] {
                   for (int i = 0; i < 4; ++i) (void)SendStopSignal(SIGTERM);
                 }}});
  };
  EXPECT_EXIT(signalled_shutdown(), ::testing::ExitedWithCode(kExitPreempted),
              "signal during the shutdown: it ends within 20 s with exit code 75");
}

// Stages run in order, each after the previous returned, and a stage that
// joins a running thread waits for it; a stage that throws is reported and
// the next still runs; the code is the one given.
TEST_F(Shutdown, StagesRunInOrderAndJoinWhatStillRuns) {
  auto ordered = [] {
    std::atomic<bool> worker_done{false};
    std::thread worker([&] {
      std::this_thread::sleep_for(milliseconds(200));
      worker_done.store(true);
    });
    EndProcess("scdino-x", 4,
               {{"the worker", [&] { worker.join(); }},
                {"a part that fails", [] { throw std::runtime_error("socket already closed"); }},
                {"the check", [&] {
                   std::cerr << (worker_done.load() ? "joined first" : "not joined") << "\n";
                 }}});
  };
  EXPECT_EXIT(ordered(), ::testing::ExitedWithCode(4),
              "while stopping a part that fails: socket already closed\njoined first");
}

// A stage that hangs (a peer's socket that never closes) does not hold the
// node: the watchdog names it and leaves with the decided code.
TEST_F(Shutdown, AHangingStageIsNamedAndTheProcessStillEndsWithItsCode) {
  auto hanging = [] {
    EndProcess("scdino-x", kExitPreempted,
               {{"the process group", [] { std::this_thread::sleep_for(std::chrono::seconds(30)); }}},
               milliseconds(300));
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(hanging(), ::testing::ExitedWithCode(kExitPreempted),
              "the shutdown did not finish within 0.3 s \\(still stopping the process group\\); exiting with 75");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace scdino::process
