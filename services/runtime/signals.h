// Stop signals of every service: SIGTERM (Slurm's preemption and time limit,
// scancel), SIGUSR1 (sbatch --signal=USR1@T) and SIGINT. The first asks the
// work loop to stop at its next boundary (keeping what is complete); a
// second ends the process at once.
#pragma once

#include <atomic>

namespace scdino::runtime {

/// The first signal sets StopSignalReceived(), prints "<program>: signal
/// received: <doing>" and sets the registered stop flag (ScopedStopFlag); a
/// second ends the process at once (exit 1; every file the services write is
/// written atomically). `program` and `doing` must outlive the process
/// (string literals). A handler rather than sigwait on a dedicated thread:
/// OpenBLAS starts its threads when the library loads, before main could
/// block signals for them.
void InstallStopSignals(const char* program, const char* doing);

/// Whether a stop signal has arrived.
bool StopSignalReceived();

/// Routes stop signals to `flag` while it lives, and to nothing after: it is
/// declared after the object owning the flag, so it is cleared before that
/// object is destroyed, also when an exception unwinds the scope. A signal
/// that came before the registration sets the flag at once.
class ScopedStopFlag {
 public:
  explicit ScopedStopFlag(std::atomic<bool>* flag);
  ~ScopedStopFlag();
  ScopedStopFlag(const ScopedStopFlag&) = delete;
  ScopedStopFlag& operator=(const ScopedStopFlag&) = delete;
};

/// The flag signals go to now (null when none): for tests.
std::atomic<bool>* RegisteredStopFlagForTesting();

}  // namespace scdino::runtime
