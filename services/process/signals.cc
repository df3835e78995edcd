#include "process/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "process/exit_codes.h"

namespace scdino::process {

namespace {

// Only lock-free atomics, write(2) and _exit(2) in the handler: all are
// signal-safe.
std::atomic<int> g_signals{0};  // arrived
std::atomic<int> g_handled{0};  // handled: printed, flag set
std::atomic<const char*> g_program{""};
std::atomic<const char*> g_doing{""};
std::atomic<std::atomic<bool>*> g_flag{nullptr};
std::atomic<bool> g_saved{false};
std::atomic<bool> g_shutting_down{false};
std::atomic<int> g_exit_code{kExitFailed};
std::atomic<int> g_bound_seconds{0};
std::atomic<pid_t> g_catcher_pid{0};  // the process whose signal thread runs
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<void*>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

void Say(const char* s) { (void)!::write(2, s, std::strlen(s)); }

// A non-negative number in decimal, without the allocator.
void SayNumber(int n) {
  char buf[16];
  char* p = buf + sizeof buf;
  *--p = '\0';
  do {
    *--p = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n > 0 && p > buf);
  Say(p);
}

void HandleStopSignal() {
  const int n = g_signals.fetch_add(1) + 1;
  Say(g_program.load());
  if (g_shutting_down.load()) {
    Say(": signal during the shutdown: it ends within ");
    SayNumber(g_bound_seconds.load());
    Say(" s with exit code ");
    SayNumber(g_exit_code.load());
    Say("\n");
    return;
  }
  if (n == 1) {
    Say(": signal received: ");
    Say(g_doing.load());
    Say("\n");
    if (auto* f = g_flag.load()) f->store(true);
    return;
  }
  if (n == 2) {
    Say(": another signal: the stop is under way (");
    Say(g_doing.load());
    Say("); a third signal exits at once\n");
    return;
  }
  if (g_saved.load()) {
    Say(": third signal: exiting now (75; what the stop saved is complete)\n");
    ::_exit(kExitPreempted);
  }
  Say(": third signal: exiting now without saving at the stop (1); the last complete checkpoint or output stays\n");
  ::_exit(kExitFailed);
}

void OnStopSignal(int) {
  HandleStopSignal();
  g_handled.fetch_add(1);
}

constexpr int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

void StopSignalSet(sigset_t* set) {
  sigemptyset(set);
  for (int sig : kStopSignals) sigaddset(set, sig);
}

// The thread that takes the stop signals (signals.h says why): it waits for
// them with sigwaitinfo, blocked like the others, and handles each as the
// handler would. Started once per process, and again in a forked child,
// which has only the thread that forked.
void StartSignalThread() {
  if (g_catcher_pid.exchange(::getpid()) == ::getpid()) return;
  std::thread([] {
    (void)pthread_setname_np(pthread_self(), "scdino-signals");
    sigset_t stop;
    StopSignalSet(&stop);
    for (;;) {
      if (::sigwaitinfo(&stop, nullptr) > 0) OnStopSignal(0);
    }
  }).detach();
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
  // One stop signal at a time: a second one waits until the handler of the
  // first returned, so their counts and messages never interleave.
  StopSignalSet(&sa.sa_mask);
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
  // The calling thread, and every thread it starts from now on (LibTorch's
  // OpenMP workers, the loaders, gRPC's), never takes one.
  pthread_sigmask(SIG_BLOCK, &sa.sa_mask, nullptr);
  StartSignalThread();
}

bool StopSignalReceived() { return g_signals.load() != 0; }

int StopSignalsHandled() { return g_handled.load(); }

void MarkStopSaved() { g_saved.store(true); }

void MarkShuttingDown(int exit_code, int bound_seconds) {
  g_exit_code.store(exit_code);
  g_bound_seconds.store(bound_seconds);
  g_shutting_down.store(true);
}

ScopedStopFlag::ScopedStopFlag(std::atomic<bool>* flag) {
  g_flag.store(flag);
  if (StopSignalReceived()) flag->store(true);  // a signal that came during set-up
}

ScopedStopFlag::~ScopedStopFlag() { g_flag.store(nullptr); }

std::atomic<bool>* RegisteredStopFlagForTesting() { return g_flag.load(); }

}  // namespace scdino::process
