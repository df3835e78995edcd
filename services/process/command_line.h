// The command line of the service mains (scdino-trainer, scdino-features,
// scdino-eval) on the shared CLI (common/cli.h): --config FILE, --threads N,
// --help, --version and each service's own flags; then the config it names
// (with the warnings of ignored keys shown once) and the CPU threads. Every
// message starts with the program's name and names the flag, value or key.
#pragma once

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.h"
#include "config/config.h"

namespace scdino::process {

/// Thread-compatible: used by a main before its work starts.
class CommandLine {
 public:
  /// `config_required` false: without --config the defaults of every key
  /// (docs/config.md) apply.
  CommandLine(const std::string& program, const std::string& description, bool config_required = true);
  /// Where a service adds its own flags.
  CLI::App& app() { return *app_; }

  /// Parses argv and loads the config of --config. nullopt: go on; else the
  /// exit code to return now (0 after --help/--version, kExitBadInput after a
  /// message).
  std::optional<int> Parse(int argc, const char* const* argv, std::ostream& out = std::cout,
                           std::ostream& err = std::cerr);

  const std::string& program() const { return program_; }
  const std::string& config_path() const { return config_path_; }
  /// The config as the file gives it with the --set settings merged in
  /// (run::ParseRunConfig), never changed after Parse. What a
  /// run derives at its start (the recipe, an elastic resume's batch) is
  /// not in it: the trainer settles its plan (plan/plan.h) and the services
  /// after it read the run's settings (run::SettingsOfRun).
  const run::RunConfig& config() const { return config_; }
  /// For the services after the trainer (features, evaluation, the
  /// preflight): the settings the run trained with (run::SettingsOfRun:
  /// the config with its recipe.json), then `flags` (a service's own
  /// flags, as config keys that win over the file); without --config, the
  /// defaults and `flags`. nullopt after a message
  /// on `err` naming the file and key: exit with kExitBadInput.
  std::optional<run::RunConfig> RunSettings(const std::vector<run::KeyValue>& flags = {},
                                            std::ostream& err = std::cerr) const;
  /// run::ConfigureCpu with --threads, else scdino.threads (0: all cores),
  /// and scdino.cpu_gemm.
  /// Returns the thread count.
  int ConfigureCpu() const;

 private:
  std::string program_, config_path_;
  std::vector<std::string> settings_;  ///< --set KEY=VALUE, in order
  int64_t threads_ = -1;
  cli::App app_;
  run::RunConfig config_;
};

}  // namespace scdino::process
