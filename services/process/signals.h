// Stop signals of every service: SIGTERM (Slurm's preemption and time limit,
// scancel), SIGUSR1 (sbatch --signal=USR1@T) and SIGINT. The first asks the
// work loop to stop at its next boundary (keeping what is complete); a
// second only says that the stop is under way, since srun sends one to
// every task left as soon as the first task of a stopped step exits; a
// third ends the process at once. Once the process has begun its ordered
// shutdown (process/shutdown.h) no signal ends it: the shutdown is bounded
// and ends with the code already decided (docs/trainer.md#shutdown).
#pragma once

#include <atomic>

namespace scdino::process {

/// The first signal sets StopSignalReceived(), prints "<program>: signal
/// received: <doing>" and sets the registered stop flag (ScopedStopFlag);
/// the second prints that the stop is under way; a third ends the process
/// at once with _exit: 75 after MarkStopSaved(), else 1 (every file the
/// services write is written atomically, so the last complete one stays).
/// During the shutdown every signal only prints. `program` and `doing`
/// must outlive the process (string literals).
///
/// The signals are taken by a thread of their own that only waits for them
/// (sigwaitinfo): the calling thread and every thread it starts afterwards
/// block them, so call it first in main. A signal handled on a computing thread can corrupt the
/// heap (oneDNN's JIT sgemm runs with its stack pointer in the heap, where
/// the kernel then writes the signal frame). The handler stays installed:
/// OpenBLAS starts its threads when the library loads, before main could
/// block signals for them, so one of them may take a signal too. A
/// child process started from a blocking thread inherits the block: start
/// children with the stop signals unblocked (posix_spawnattr_setsigmask).
void InstallStopSignals(const char* program, const char* doing);

/// Whether a stop signal has arrived.
bool StopSignalReceived();

/// How many stop signals have been handled (their line printed, the flag
/// set): a test waits for one, since it is handled on the signal thread,
/// not by the thread that sent it.
int StopSignalsHandled();

/// The work saved what it had after a stop signal (the trainer's
/// checkpoint): from now on the process leaves with 75 whatever signal
/// comes next, so every rank of a preempted step reports the same code.
void MarkStopSaved();

/// The process began its ordered shutdown, which ends with `exit_code`
/// within `bound_seconds`: later signals print that and are otherwise
/// ignored (process/shutdown.h calls it).
void MarkShuttingDown(int exit_code, int bound_seconds);

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

}  // namespace scdino::process
