#include "runtime/command_line.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <sstream>

#include "common/files.h"
#include "runtime/service_plane.h"
#include "support/test_support.h"

namespace scdino::runtime {
namespace {

using scdino::testing::ScratchDir;

struct Run {
  std::optional<int> code;
  std::string out, err;
};

// Parses `args` (after the program name) with a --depth count and a --mode
// value that must be a or b.
Run ParseWith(std::vector<std::string> args, int64_t* depth = nullptr, std::string* mode = nullptr) {
  int64_t d = -1;
  std::string m;
  CommandLine cl("scdino-x", "usage: scdino-x --config FILE\n");
  cl.Count("--depth", depth ? depth : &d).Value("--mode", [&](const std::string& v) {
    (mode ? *mode : m) = v;
    return v == "a" || v == "b" ? std::string() : std::string("a or b");
  });
  std::vector<const char*> argv{"scdino-x"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Run r;
  r.code = cl.Parse(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(CommandLine, ParsesFlagsLoadsTheConfigAndSetsThreads) {
  ScratchDir s;
  const std::string config = s.file("run.yaml");
  ASSERT_TRUE(WriteFileAtomic(config, "meta: {name_of_run: r, output_dir: \"" + s.path() + "\"}\n"
                                      "scdino: {threads: 1, data_source: synthetic}\n")
                  .ok());
  int64_t depth = -1;
  std::string mode;
  auto r = ParseWith({"--config", config, "--depth", "3", "--mode", "b"}, &depth, &mode);
  EXPECT_FALSE(r.code.has_value()) << r.err;
  EXPECT_EQ(depth, 3);
  EXPECT_EQ(mode, "b");

  CommandLine cl("scdino-x", "usage\n");
  const char* argv[] = {"scdino-x", "--config", config.c_str(), "--threads", "2"};
  std::ostringstream out, err;
  ASSERT_FALSE(cl.Parse(5, argv, out, err).has_value()) << err.str();
  EXPECT_EQ(cl.config().meta.name_of_run, "r");
  EXPECT_EQ(cl.config_path(), config);
  EXPECT_EQ(cl.ConfigureThreads(), 2);  // --threads over scdino.threads
  EXPECT_EQ(cl.Device(0)->type(), torch::kCPU);
}

TEST(CommandLine, HelpPrintsTheUsageAndExitsZero) {
  auto r = ParseWith({"--depth", "1", "--help"});
  EXPECT_EQ(r.code, kExitCompleted);
  EXPECT_EQ(r.out, "usage: scdino-x --config FILE\n");
}

TEST(CommandLine, BadCommandLinesNameTheFlagAndValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "scdino-x: unknown argument '--bogus'"},
      {{"--config"}, "scdino-x: --config needs a value"},
      {{"--depth", "-1"}, "scdino-x: --depth expects an integer >= 0, got '-1'"},
      {{"--depth", "2x"}, "scdino-x: --depth expects an integer >= 0, got '2x'"},
      {{"--threads", ""}, "scdino-x: --threads expects an integer >= 0, got ''"},
      {{"--mode", "c"}, "scdino-x: --mode expects a or b, got 'c'"},
      {{"--mode", "a"}, "scdino-x: --config FILE is required"},
  };
  for (const auto& [args, message] : cases) {
    auto r = ParseWith(args);
    EXPECT_EQ(r.code, kExitBadInput) << message;
    EXPECT_EQ(r.err.rfind(message + "\n", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("usage: scdino-x"), std::string::npos) << r.err;  // and the usage
  }
}

TEST(CommandLine, ABadConfigIsNamedWithoutTheUsage) {
  ScratchDir s;
  auto r = ParseWith({"--config", s.file("missing.yaml")});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_NE(r.err.find("scdino-x: "), std::string::npos);
  EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("usage"), std::string::npos) << r.err;
}

TEST(CommandLine, CudaWithoutAGpuNamesTheConfig) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  ScratchDir s;
  const std::string config = s.file("gpu.yaml");
  ASSERT_TRUE(WriteFileAtomic(config, "meta: {output_dir: \"" + s.path() + "\"}\n"
                                      "scdino: {device: cuda, data_source: synthetic}\n")
                  .ok());
  CommandLine cl("scdino-x", "usage\n");
  const char* argv[] = {"scdino-x", "--config", config.c_str()};
  std::ostringstream out, err;
  ASSERT_FALSE(cl.Parse(3, argv, out, err).has_value()) << err.str();
  auto d = cl.Device(0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(config + ": scdino.device is cuda"), std::string::npos) << d.status().message();
}

std::atomic<int> g_first_calls{0};

TEST(StopSignals, TheFirstSignalIsRecordedAndCallsBack) {
  InstallStopSignals("scdino-x", "finishing the batch", [] { g_first_calls.fetch_add(1); });
  EXPECT_FALSE(StopSignalReceived());
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(::raise(SIGUSR1), 0);  // handled synchronously on this thread
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(StopSignalReceived());
  EXPECT_EQ(g_first_calls.load(), 1);
  EXPECT_EQ(said, "scdino-x: signal received: finishing the batch\n");
}

}  // namespace
}  // namespace scdino::runtime
