// scdinoctl's logic: its command line, the commands over the control API
// (status, watch, pause, resume, stop, checkpoint, checkpoints,
// rotate-token) and how their answers are printed. The main only parses and
// runs; tests/ctl runs the commands against a real control server.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "scdino/v1/control.pb.h"

namespace scdino::ctl {

/// scdinoctl's exit codes, documented in docs/control.md.
inline constexpr int kOk = 0;
inline constexpr int kFailed = 1;
inline constexpr int kBadArguments = 2;
inline constexpr int kUnreachable = 3;
inline constexpr int kUnauthenticated = 4;
inline constexpr int kNotFound = 5;
inline constexpr int kRefused = 6;  ///< the run cannot do that now (e.g. it has ended)

/// The command line, parsed.
struct Options {
  std::string command, run_dir, service = "trainer", target, token_file, tls_ca, tls_name;
  /// With several channel combinations: which one's run under --run-dir
  /// (its folder, or the channel names its folder ends with).
  std::string combination;
  bool json = false, tls = false;
  double timeout = -1;  ///< seconds; -1: the command's default (10; checkpoint: 600)
  int64_t interval_ms = 0;
  double wait = 0;  ///< watch: seconds to wait for the run to start and answer
  /// watch: the Slurm job (or array task, ARRAY_TASK) the run is in: waited
  /// for as long as Slurm lists it; once it is gone, how the run ended.
  std::string job;
};

/// Parses argv into `o`; an exit code when the program ends here (kOk after
/// --help, kBadArguments after a message on `err`).
std::optional<int> ParseCommandLine(int argc, const char* const* argv, Options* o, std::ostream& out,
                                    std::ostream& err);

/// Runs the parsed command: answers on `out`, messages on `err`; returns
/// the exit code.
int Run(const Options& o, std::ostream& out, std::ostream& err);

/// "3m05s", "1h02m", "7s"; "-" for none.
std::string Duration(double seconds);
/// A long stage's progress: "linear probe: fits 3/6 (50%), 0.40 fits/s,
/// ETA 8s", or "...: 6 fits, done".
std::string Stage(const v1::Progress& p);
/// `status`'s table: one "name  value" line per field the service sends.
std::string StatusTable(const v1::Status& s);
/// `watch`'s line for `s` at `now_unix_ms`.
std::string StatusLine(const v1::Status& s, int64_t now_unix_ms);

/// The runs of a file's channel combinations under `top`
/// (<output_dir>/<name_of_run>): its sub-folders that hold a run (a
/// control token, endpoints or a checkpoint), sorted; empty when `top` is
/// a run itself.
std::vector<std::string> CombinationsOf(const std::string& top);

}  // namespace scdino::ctl
