#include "runtime/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "runtime/exit_codes.h"

namespace scdino::runtime {

namespace {

// Only lock-free atomics and write(2) in the handler: both are signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<const char*> g_program{""};
std::atomic<const char*> g_doing{""};
std::atomic<std::atomic<bool>*> g_flag{nullptr};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<void*>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

void Say(const char* a, const char* b, const char* c) {
  for (const char* s : {a, b, c}) (void)!::write(2, s, std::strlen(s));
}

void OnStopSignal(int sig) {
  if (g_stop_signal.exchange(sig) != 0) {
    Say(g_program.load(), ": second signal, exiting now", "\n");
    std::_Exit(kExitFailed);
  }
  Say(g_program.load(), ": signal received: ", g_doing.load());
  Say("\n", "", "");
  if (auto* f = g_flag.load()) f->store(true);
}

}  // namespace

void InstallStopSignals(const char* program, const char* doing) {
  g_program.store(program);
  g_doing.store(doing);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  // A read, write or wait interrupted by the signal resumes instead of
  // failing with EINTR in code that does not retry (a library's, a
  // stream's); the loops see the flag at their next boundary.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

bool StopSignalReceived() { return g_stop_signal.load() != 0; }

ScopedStopFlag::ScopedStopFlag(std::atomic<bool>* flag) {
  g_flag.store(flag);
  if (StopSignalReceived()) flag->store(true);  // a signal that came during set-up
}

ScopedStopFlag::~ScopedStopFlag() { g_flag.store(nullptr); }

std::atomic<bool>* RegisteredStopFlagForTesting() { return g_flag.load(); }

}  // namespace scdino::runtime
