// What the service mains share before their work starts: the command line
// (--config FILE, --threads N, -h/--help and each service's own flags), the
// config it names, the CPU threads and the device. Every message starts with
// the program's name and names the flag, value or config key.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "training/config.h"

namespace scdino::runtime {

class CommandLine {
 public:
  /// program: "scdino-eval", the prefix of every message; usage: the help
  /// text, printed for --help and after a bad command line.
  CommandLine(std::string program, std::string usage);
  CommandLine(const CommandLine&) = delete;  // its flags point into it
  CommandLine& operator=(const CommandLine&) = delete;

  /// A flag without a value.
  CommandLine& Switch(const std::string& flag, std::function<void()> on);
  /// A flag with a value. `on` returns "" when the value is good, else what
  /// was expected ("teacher or student").
  CommandLine& Value(const std::string& flag, std::function<std::string(const std::string&)> on);
  /// A flag with an integer >= 0.
  CommandLine& Count(const std::string& flag, int64_t* out);

  /// Parses argv (messages to `err`, help to `out`) and loads the config of
  /// --config. nullopt: go on; else the exit code to return now: 0 after
  /// --help, kExitBadInput after a message.
  std::optional<int> Parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

  const std::string& program() const { return program_; }
  const std::string& config_path() const { return config_path_; }
  training::TrainConfig& config() { return config_; }
  const training::TrainConfig& config() const { return config_; }
  /// Sets LibTorch's and OpenBLAS's threads: --threads, else scdino.threads
  /// (0: all cores). Returns the count.
  int ConfigureThreads() const;
  /// scdino.device for the process of `local_rank`: CPU, or the local
  /// rank's GPU (one GPU per task). An error names the config when it asks
  /// for CUDA and there is none.
  StatusOr<torch::Device> Device(int64_t local_rank) const;

 private:
  struct Flag {
    std::string name;
    bool takes_value = false;
    std::function<std::string(const std::string&)> on;
  };
  std::string program_, usage_, config_path_;
  int64_t threads_ = -1;
  std::vector<Flag> flags_;
  training::TrainConfig config_;
};

/// SIGTERM, SIGUSR1 (Slurm's --signal=USR1@T) and SIGINT: the first sets
/// StopSignalReceived(), prints "<program>: signal received: <doing>" and
/// calls `on_first` (which must be signal-safe); a second ends the process at
/// once (exit 1; every file the services write is written atomically).
/// `program` and `doing` must outlive the process (string literals). A
/// handler rather than sigwait on a dedicated thread: OpenBLAS starts its
/// threads when the library loads, before main could block signals for them.
void InstallStopSignals(const char* program, const char* doing, void (*on_first)() = nullptr);

/// Whether a stop signal has arrived.
bool StopSignalReceived();

}  // namespace scdino::runtime
