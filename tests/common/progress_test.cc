#include "common/progress.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace scdino {
namespace {

ProgressStyle Lines(std::chrono::milliseconds interval) {
  ProgressStyle s;
  s.interval = interval;
  return s;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Progress, ALogGetsDoneTotalRateAndEtaThenTheStagesTime) {
  std::ostringstream out;
  ProgressLog log(&out, "scdino-features", "images", Lines(std::chrono::milliseconds(0)));
  log.Report(0, 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log.Report(100, 400);
  EXPECT_GT(log.rate(), 0.0);
  EXPECT_LT(log.rate(), 100 / 0.05) << "100 images in at least 50 ms";
  log.Report(400, 400);
  const std::string text = out.str();
  EXPECT_NE(text.find("scdino-features: images 0/400 (0%)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("scdino-features: images 100/400 (25%), "), std::string::npos) << text;
  EXPECT_NE(text.find(" images/s, ETA "), std::string::npos) << text;
  // Reaching the total ends the stage: its count and time, once.
  EXPECT_NE(text.find("scdino-features: 400 images in "), std::string::npos) << text;
  log.Report(400, 400);
  log.Done(400);
  EXPECT_EQ(Count(out.str(), " images in "), 1) << out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos) << "a log is not redrawn";
}

TEST(Progress, LinesComeAtABoundedRateWhateverTheReports) {
  std::ostringstream out;
  ProgressLog log(&out, "scdino-eval", "queries", Lines(std::chrono::hours(1)));
  for (int64_t i = 0; i < 100000; ++i) log.Report(i, 100000);
  EXPECT_EQ(log.lines(), 0) << "a stage shorter than the interval prints its last line only: " << out.str();
  log.Report(100000, 100000);
  EXPECT_EQ(log.lines(), 1);
  EXPECT_EQ(Count(out.str(), "\n"), 1) << out.str();
  std::ostringstream timed;
  ProgressLog every(&timed, "scdino-eval", "queries", Lines(std::chrono::milliseconds(30)));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 40; ++i) {
    every.Report(i, 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // At least 200 ms of reports (more on a loaded machine: the bound is the
  // time they took), a line per 30 ms at most.
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_GE(every.lines(), 3) << timed.str();
  EXPECT_LE(every.lines(), ms.count() / 30 + 1) << ms.count() << " ms: " << timed.str();
}

TEST(Progress, ATerminalRedrawsOneLineAndEndsIt) {
  std::ostringstream out;
  ProgressStyle tty;
  tty.redraw = true;
  tty.interval = std::chrono::milliseconds(0);
  {
    ProgressLog log(&out, "scdino-eval: t-SNE", "iterations", tty);
    log.Report(1, 10);
    log.Report(2, 10);
    log.Done(10);
  }
  const std::string text = out.str();
  EXPECT_EQ(Count(text, "\r"), 3) << text;
  EXPECT_EQ(Count(text, "\n"), 1) << "only the last line ends: " << text;
  EXPECT_NE(text.find("\rscdino-eval: t-SNE: 10 iterations in "), std::string::npos) << text;
  // Destroyed in the middle of a redrawn line: the line is ended.
  std::ostringstream cut;
  { ProgressLog(&cut, "scdino-eval: UMAP", "epochs", tty).Report(3, 100); }
  EXPECT_EQ(cut.str().back(), '\n') << cut.str();
}

TEST(Progress, ACountBelowTheLastAfterTheEndIsANewRound) {
  std::ostringstream out;
  ProgressLog log(&out, "scdino-features", "images", Lines(std::chrono::milliseconds(0)));
  log.Report(0, 50);
  log.Report(50, 50);
  log.Report(0, 50);  // the next checkpoint's images
  log.Report(50, 50);
  EXPECT_EQ(Count(out.str(), "scdino-features: 50 images in "), 2) << out.str();
  EXPECT_EQ(Count(out.str(), "images 0/50 (0%)"), 2) << out.str();
}

TEST(Progress, AnUnknownTotalShowsTheCountAndRateOnly) {
  std::ostringstream out;
  ProgressLog log(&out, "scdino-pack", "images", Lines(std::chrono::milliseconds(0)));
  log.Report(0, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  log.Report(7, 0);
  EXPECT_NE(out.str().find("scdino-pack: images 7, "), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("ETA"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find('%'), std::string::npos) << out.str();
}

TEST(Progress, NoStreamPrintsNothing) {
  ProgressLog log(nullptr, "scdino-eval", "queries", Lines(std::chrono::milliseconds(0)));
  log.Report(1, 2);
  log.Done(2);
  EXPECT_EQ(log.lines(), 0);
}

// Every stage also reaches the process's stage sink (the service plane's
// status and metrics): its first report, at most one a second after, and
// its end; named by what follows the program in its prefix.
TEST(Progress, EveryStageReachesTheSinkAtABoundedRateAndAtItsEnd) {
  std::vector<StageProgress> seen;
  std::mutex mu;
  SetStageSink([&](const StageProgress& p) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(p);
  });
  {
    ProgressLog log(nullptr, "scdino-eval: linear probe", "fits");
    for (int64_t i = 0; i < 100; ++i) log.Report(i, 2000);  // well within a second
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    log.Report(1000, 2000);
    log.Report(2000, 2000);
    log.Report(2000, 2000);  // after the end: nothing more
  }
  ProgressLog plane(nullptr, "scdino-features", "images");
  plane.set_stage("features");
  plane.Report(3, 0);
  plane.Done(7);
  SetStageSink({});
  ProgressLog after(nullptr, "scdino: indexing", "images");
  after.Report(1, 0);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].stage, "linear probe");
  EXPECT_EQ(seen[0].unit, "fits");
  EXPECT_EQ(seen[0].done, 0);
  EXPECT_EQ(seen[0].total, 2000);
  EXPECT_FALSE(seen[0].finished);
  EXPECT_EQ(seen[1].done, 1000);
  EXPECT_GT(seen[1].per_second, 0.0);
  EXPECT_GT(seen[1].eta_seconds, 0.0);
  EXPECT_EQ(seen[2].done, 2000);
  EXPECT_TRUE(seen[2].finished);
  EXPECT_EQ(seen[2].eta_seconds, 0.0);
  EXPECT_EQ(seen[3].stage, "features");
  EXPECT_EQ(seen[3].total, 0);
  EXPECT_EQ(seen[4].done, 7);
  EXPECT_TRUE(seen[4].finished);
}

TEST(Progress, DurationsReadAsAClock) {
  EXPECT_EQ(FormatDuration(0), "0 s");
  EXPECT_EQ(FormatDuration(42.4), "42 s");
  EXPECT_EQ(FormatDuration(402), "6:42");
  EXPECT_EQ(FormatDuration(3903), "1:05:03");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(Progress, TheIntervalComesFromTheEnvironmentAndABadOneIsNamed) {
  std::ostringstream log;  // not a terminal
  unsetenv("SCDINO_PROGRESS_SECONDS");
  EXPECT_EQ(ProgressStyleFor(&log).interval, std::chrono::milliseconds(10000));
  EXPECT_FALSE(ProgressStyleFor(&log).redraw);
  setenv("SCDINO_PROGRESS_SECONDS", "2.5", 1);
  EXPECT_EQ(ProgressStyleFor(&log).interval, std::chrono::milliseconds(2500));
  setenv("SCDINO_PROGRESS_SECONDS", "0", 1);
  EXPECT_TRUE(ProgressStyleFor(&log).quiet);
  setenv("SCDINO_PROGRESS_SECONDS", "soon", 1);
  ::testing::internal::CaptureStderr();
  const ProgressStyle bad = ProgressStyleFor(&log);
  const std::string said = ::testing::internal::GetCapturedStderr();
  unsetenv("SCDINO_PROGRESS_SECONDS");
  EXPECT_FALSE(bad.quiet);
  EXPECT_EQ(bad.interval, std::chrono::milliseconds(10000));
  EXPECT_NE(said.find("SCDINO_PROGRESS_SECONDS='soon': expected seconds between progress lines"), std::string::npos)
      << said;
}

}  // namespace
}  // namespace scdino
