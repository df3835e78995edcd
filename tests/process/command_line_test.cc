// The service mains' command line on the shared CLI: flags with defaults in
// --help, --version, errors naming the flag and value with exit code 2, the
// config loaded (its ignored keys said once), threads; device choice; and
// the exit codes.
#include "process/command_line.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/files.h"
#include "common/torch_compat.h"
#include "launch/environment.h"
#include "plan/recipe.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/signals.h"
#include "support/stop_signals.h"
#include "support/test_support.h"

namespace scdino::process {
namespace {

using scdino::testing::ScratchDir;

struct Run {
  std::optional<int> code;
  std::string out, err;
};

// Parses `args` (after the program name) with a service's own --depth count
// and a --mode that must be a or b.
Run ParseWith(std::vector<std::string> args, int64_t* depth = nullptr) {
  int64_t d = -1;
  std::string mode = "a";
  CommandLine cl("scdino-x", "A test service.");
  cl.app().add_option("--depth", depth ? *depth : d, "blocks")->check(CLI::NonNegativeNumber);
  cl.app().add_option("--mode", mode, "how")->check(CLI::IsMember({"a", "b"}));
  std::vector<const char*> argv{"scdino-x"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Run r;
  r.code = cl.Parse(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string Config(const ScratchDir& s, const std::string& extra = "") {
  const std::string config = s.file("run.yaml");
  EXPECT_TRUE(WriteFileAtomic(config, "meta: {name_of_run: r, output_dir: \"" + s.path() + "\"}\n"
                                      "scdino: {threads: 1, data_source: synthetic}\n" + extra)
                  .ok());
  return config;
}

TEST(CommandLine, ParsesFlagsLoadsTheConfigAndSetsThreads) {
  ScratchDir s;
  const std::string config = Config(s);
  int64_t depth = -1;
  auto r = ParseWith({"--config", config, "--depth", "3", "--mode", "b"}, &depth);
  EXPECT_FALSE(r.code.has_value()) << r.err;
  EXPECT_EQ(depth, 3);

  CommandLine cl("scdino-x", "A test service.");
  const char* argv[] = {"scdino-x", "--config", config.c_str(), "--threads", "2"};
  std::ostringstream out, err;
  ASSERT_FALSE(cl.Parse(5, argv, out, err).has_value()) << err.str();
  EXPECT_EQ(cl.config().meta.name_of_run, "r");
  EXPECT_EQ(cl.config_path(), config);
  EXPECT_EQ(cl.ConfigureCpu(), 2);  // --threads over scdino.threads
}

TEST(CommandLine, HelpListsEveryFlagWithItsDefaultAndVersionPrintsTheVersion) {
  auto r = ParseWith({"--help"});
  EXPECT_EQ(r.code, kExitCompleted);
  for (const char* part : {"A test service.", "--config", "--threads", "scdino.threads", "--depth", "--mode",
                           "--version", "--help"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " in:\n" << r.out;
  }
  auto v = ParseWith({"--version"});
  EXPECT_EQ(v.code, kExitCompleted);
  EXPECT_EQ(v.out.rfind(std::string("scdino-x ") + SCDINO_VERSION + "\nLibTorch " + compat::TorchVersion(), 0), 0u) << v.out;
  // A CPU build says it has no CUDA; a CUDA build says which and how many
  // GPUs it sees (none here).
  EXPECT_TRUE(v.out.find("CPU only (built without CUDA)") != std::string::npos ||
              (v.out.find("compiled in") != std::string::npos && v.out.find("GPUs visible: ") != std::string::npos))
      << v.out;
}

TEST(CommandLine, BadCommandLinesNameTheFlagAndValue) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--bogus"}, {"--bogus"}},
      {{"--config"}, {"--config"}},
      {{"--config", "x.yaml", "--depth", "-1"}, {"--depth", "-1"}},
      {{"--config", "x.yaml", "--depth", "2x"}, {"--depth", "2x"}},
      {{"--config", "x.yaml", "--threads", "many"}, {"--threads", "many"}},
      {{"--config", "x.yaml", "--mode", "c"}, {"--mode", "c"}},
      {{"--mode", "a"}, {"--config", "required"}},
  };
  for (const auto& [args, parts] : cases) {
    auto r = ParseWith(args);
    EXPECT_EQ(r.code, kExitBadInput) << parts[0];
    EXPECT_EQ(r.err.rfind("scdino-x: ", 0), 0u) << r.err;
    for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " in: " << r.err;
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
  }
}

// --set KEY=VALUE, repeatable, on every service: the config as if the file
// said so; a bad one, or one without a config, is refused before anything
// starts, naming it.
TEST(CommandLine, SetGivesAKeyAValueAsIfTheFileDid) {
  ScratchDir s;
  const std::string config = Config(s);
  CommandLine cl("scdino-x", "A test service.");
  const char* argv[] = {"scdino-x", "--config", config.c_str(), "--set", "meta.name_of_run=sweep-2",
                        "--set=train_scDINO.epochs=17"};
  std::ostringstream out, err;
  ASSERT_FALSE(cl.Parse(6, argv, out, err).has_value()) << err.str();
  EXPECT_EQ(cl.config().meta.name_of_run, "sweep-2");
  EXPECT_EQ(cl.config().train.epochs, 17);
  EXPECT_EQ(cl.config().scdino.threads, 1);  // the file's
  EXPECT_NE(cl.config().source_text.find("--set meta.name_of_run=sweep-2 --set train_scDINO.epochs=17"),
            std::string::npos);

  // Without a config there is no key to set.
  CommandLine defaults("scdino-x", "A test service.", /*config_required=*/false);
  const char* bare[] = {"scdino-x", "--set", "scdino.threads=5"};
  std::ostringstream bare_err;
  EXPECT_EQ(defaults.Parse(3, bare, out, bare_err), kExitBadInput);
  EXPECT_EQ(bare_err.str(), "scdino-x: --set scdino.threads=5: --set changes a config's key; give the config "
                            "(--config FILE)\n");

  auto bad = ParseWith({"--config", config, "--set", "train_scDINO.epoch=7"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_NE(bad.err.find("scdino-x: " + config + ": --set train_scDINO.epoch=7: unknown key 'train_scDINO.epoch' "
                         "(known keys of train_scDINO: "),
            std::string::npos)
      << bad.err;
  auto help = ParseWith({"--help"});
  EXPECT_NE(help.out.find("--set KEY=VALUE"), std::string::npos) << help.out;
}

TEST(CommandLine, ABadConfigIsNamedAndIgnoredKeysAreSaid) {
  ScratchDir s;
  auto r = ParseWith({"--config", s.file("missing.yaml")});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_NE(r.err.find("scdino-x: "), std::string::npos);
  EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;
  const std::string ignored = Config(s, "train_scDINO: {num_gpus: 4, dist_url: env://}\n");
  auto w = ParseWith({"--config", ignored});
  EXPECT_FALSE(w.code.has_value()) << w.err;
  // Both in one line.
  EXPECT_NE(w.err.find(": 2 key(s) ignored: train_scDINO.num_gpus is ignored"), std::string::npos) << w.err;
  EXPECT_NE(w.err.find("; train_scDINO.dist_url is ignored"), std::string::npos) << w.err;
  EXPECT_EQ(std::count(w.err.begin(), w.err.end(), '\n'), 1) << w.err;
  // Said by rank 0 alone: another rank of the step is silent about them.
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  auto other = ParseWith({"--config", ignored});
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  EXPECT_FALSE(other.code.has_value()) << other.err;
  EXPECT_EQ(other.err, "");
}

// The services after the trainer take the run's settings: its recipe.json
// (the file's keys still win), then their own flags as config keys; the
// config as parsed never changes.
TEST(CommandLine, ServicesTakeTheRunsRecipeThenTheirFlags) {
  ScratchDir s;
  const std::string config = s.file("auto.yaml");
  ASSERT_TRUE(WriteFileAtomic(config, "meta: {name_of_run: r, output_dir: \"" + s.path() + "\"}\n"
                                      "train_scDINO: {hyperparameters: {out_dim: 128}}\n"
                                      "scdino: {threads: 1, data_source: synthetic, recipe: auto}\n")
                  .ok());
  CommandLine cl("scdino-x", "A test service.");
  const char* argv[] = {"scdino-x", "--config", config.c_str()};
  std::ostringstream out, err;
  ASSERT_FALSE(cl.Parse(3, argv, out, err).has_value()) << err.str();
  // No recipe.json yet: the file's values and the defaults, said.
  std::ostringstream said;
  auto before = cl.RunSettings({}, said);
  ASSERT_TRUE(before.has_value()) << said.str();
  EXPECT_NE(said.str().find("scdino-x: warning: scdino.recipe is auto but " + s.file("r/recipe.json") +
                            " is not there yet"),
            std::string::npos)
      << said.str();
  EXPECT_EQ(before->train.hyperparameters.patch_size, 16);
  // The trainer wrote it.
  ASSERT_TRUE(MakeDirs(s.file("r")).ok());
  ASSERT_TRUE(run::WriteRecipe(s.file("r/recipe.json"), run::DataShape{},
                               {{"train_scDINO.hyperparameters.patch_size", "4", "", false},
                                {"train_scDINO.hyperparameters.out_dim", "64", "", false}})
                  .ok());
  std::ostringstream quiet;
  auto after = cl.RunSettings({{"scdino.features.write_raw", "true"}}, quiet);
  ASSERT_TRUE(after.has_value()) << quiet.str();
  EXPECT_EQ(quiet.str(), "");
  EXPECT_EQ(after->train.hyperparameters.patch_size, 4);
  EXPECT_EQ(after->train.hyperparameters.out_dim, 128) << "the file's key wins over the recipe";
  EXPECT_TRUE(after->scdino.features.write_raw);
  EXPECT_EQ(cl.config().train.hyperparameters.patch_size, 16) << "the parsed config is not changed";
  EXPECT_FALSE(cl.config().scdino.features.write_raw);
  // A flag's bad value is refused naming the key.
  std::ostringstream refused;
  EXPECT_FALSE(cl.RunSettings({{"scdino.features.write_raw", "maybe"}}, refused).has_value());
  EXPECT_NE(refused.str().find("scdino.features.write_raw"), std::string::npos) << refused.str();
}

TEST(Device, CudaWithoutAGpuNamesTheConfig) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  ScratchDir s;
  ASSERT_TRUE(WriteFileAtomic(s.file("gpu.yaml"), "meta: {output_dir: \"" + s.path() + "\"}\n"
                                                  "scdino: {device: cuda, data_source: synthetic}\n")
                  .ok());
  auto gpu = run::LoadRunConfig(s.file("gpu.yaml"));
  ASSERT_TRUE(gpu.ok());
  auto d = run::PickDevice(*gpu, run::LaunchInfo{});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(s.file("gpu.yaml") + ": scdino.device is cuda"), std::string::npos)
      << d.status().message();
  EXPECT_EQ(ExitCodeFor(d.status()), kExitBadInput);
}

// auto is the GPU when one is visible, else the CPU, and says which; the
// choice is the rank's placement: the config keeps what the file says, and
// the precision follows the device chosen.
TEST(Device, AutoRunsOnTheCpuWhereNoGpuIsVisibleAndSaysSo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  ScratchDir s;
  ASSERT_TRUE(WriteFileAtomic(s.file("auto.yaml"), "meta: {output_dir: \"" + s.path() + "\"}\n"
                                                   "scdino: {device: auto, data_source: synthetic}\n")
                  .ok());
  auto config = run::LoadRunConfig(s.file("auto.yaml"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto d = run::PickDevice(*config, run::LaunchInfo{});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->device.is_cpu());
  EXPECT_EQ(config->scdino.device, "auto");
  EXPECT_EQ(config->precision(d->device), model::Precision::kFp32);
  EXPECT_TRUE(d->why == "scdino.device auto: no GPU visible" || d->why == "scdino.device auto: a build without CUDA")
      << d->why;
}

TEST(ExitCodes, BadInputIsTwoEverythingElseOne) {
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Status::DataLoss("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Status::FailedPrecondition("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Status::NotFound("x")), kExitBadInput);
  EXPECT_EQ(ExitCodeFor(Status::IOError("x")), kExitFailed);
  EXPECT_EQ(ExitCodeFor(Status::Unavailable("x")), kExitFailed);
  EXPECT_EQ(ExitCodeFor(Status::Aborted("x")), kExitFailed);
  EXPECT_EQ(ExitCodeFor(Status::Diverged("x")), kExitDiverged);
}

// A run that diverges while a signal arrives (a job-wide TERM, the time
// limit's USR1) must not leave with the preemption code: the batch script
// would requeue it and it would diverge again. A stop that is a stop still
// does. In a child process: the signal state is the process's.
TEST(ExitCodes, ADivergedRunMeetingASignalIsNeverAPreemption) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto signalled_then_fail = [](const Status& s) {
    InstallStopSignals("scdino-x", "finishing the step");
    if (!scdino::testing::SendStopSignal(SIGTERM)) std::_Exit(9);
    std::exit(Fail(nullptr, "scdino-x", s));
  };
  EXPECT_EXIT(signalled_then_fail(Status::Diverged("loss is nan at iteration 7")),
              ::testing::ExitedWithCode(kExitDiverged), "scdino-x: loss is nan at iteration 7");
  EXPECT_EXIT(signalled_then_fail(Status::Aborted("stopped; 3 shards written")),
              ::testing::ExitedWithCode(kExitPreempted), "stopped; 3 shards written");
}

}  // namespace
}  // namespace scdino::process
