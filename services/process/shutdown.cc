#include "process/shutdown.h"

#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "process/signals.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace scdino::process {

namespace {

// The code the alarm's handler exits with (async-signal-safe to read).
volatile sig_atomic_t alarm_exit_code = 1;

void Flush() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
}

}  // namespace

void EndProcess(const std::string& program, int exit_code, std::vector<ShutdownStage> stages,
                std::chrono::milliseconds bound) {
  MarkShuttingDown(exit_code, static_cast<int>((bound.count() + 999) / 1000));
  // The watchdog is never joined: the process ends with _exit either way.
  struct Watch {
    std::mutex mu;
    std::condition_variable cv;
    std::string stage = "the start";
    bool done = false;
  };
  auto watch = std::make_shared<Watch>();
  try {
    std::thread([watch, program, exit_code, bound] {
      std::unique_lock<std::mutex> lock(watch->mu);
      if (watch->cv.wait_for(lock, bound, [watch] { return watch->done; })) return;
      std::cerr << program << ": the shutdown did not finish within " << bound.count() / 1000.0
                << " s (still stopping " << watch->stage << "); exiting with " << exit_code << "\n";
      Flush();
      ::_exit(exit_code);
    }).detach();
  } catch (const std::exception& e) {
    // No thread to be had (the user's process limit reached): the kernel's
    // alarm ends the process with the same code instead. The path that
    // ends a process never throws, so its code is never 134.
    alarm_exit_code = exit_code;
    std::signal(SIGALRM, [](int) { ::_exit(alarm_exit_code); });
    ::alarm(static_cast<unsigned>((bound.count() + 999) / 1000));
    std::cerr << program << ": no thread for the shutdown's watchdog (" << e.what()
              << "); a " << (bound.count() + 999) / 1000 << " s alarm bounds it instead\n";
  }
  for (auto& s : stages) {
    {
      std::lock_guard<std::mutex> lock(watch->mu);
      watch->stage = s.name;
    }
    try {
      s.run();
    } catch (const std::exception& e) {
      std::cerr << program << ": while stopping " << s.name << ": " << e.what() << "\n";
    }
  }
  {
    std::lock_guard<std::mutex> lock(watch->mu);
    watch->done = true;
  }
  watch->cv.notify_all();
  Flush();
#if defined(__SANITIZE_ADDRESS__)
  // _exit skips the check LeakSanitizer runs at exit(): ask for it here.
  __lsan_do_leak_check();
#endif
  ::_exit(exit_code);
}

}  // namespace scdino::process
