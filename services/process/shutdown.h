// The end of a service process, the same for every exit code
// (docs/trainer.md#shutdown): the parts that run threads are stopped and
// joined one after the other in a fixed order on the main thread, under a
// watchdog; then the process leaves with _exit. No static destructor of a
// library runs while a thread that library started (gRPC's executor and
// timer threads, Gloo's loops, OpenBLAS's pool) may still touch what it
// frees; every file scdino writes is complete and closed before.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace scdino::process {

/// One part's stop: `run` stops and joins its threads (usually by
/// destroying the object that owns them).
struct ShutdownStage {
  std::string name;  ///< what it stops, for the watchdog's message
  std::function<void()> run;
};

/// How long the stages may take in all before the watchdog ends the process
/// with the exit code already decided: below Slurm's default KillWait (30 s),
/// so that code, not SIGKILL's, reaches srun.
inline constexpr std::chrono::seconds kShutdownBound{20};

/// Marks the shutdown (a signal from now on only prints; signals.h), runs
/// `stages` in order, flushes stdout and stderr, lets LeakSanitizer check
/// a sanitizer build (a leak exits 23), and ends the process with
/// _exit(exit_code). A stage that throws is reported and the next runs. If
/// the stages take longer than `bound`, a watchdog names the stage that
/// hangs and ends the process with exit_code.
[[noreturn]] void EndProcess(const std::string& program, int exit_code, std::vector<ShutdownStage> stages = {},
                             std::chrono::milliseconds bound = kShutdownBound);

}  // namespace scdino::process
