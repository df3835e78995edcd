#include "process/shutdown.h"

#include <unistd.h>

#include <condition_variable>
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
  std::thread([watch, program, exit_code, bound] {
    std::unique_lock<std::mutex> lock(watch->mu);
    if (watch->cv.wait_for(lock, bound, [watch] { return watch->done; })) return;
    std::cerr << program << ": the shutdown did not finish within " << bound.count() / 1000.0 << " s (still stopping "
              << watch->stage << "); exiting with " << exit_code << "\n";
    Flush();
    ::_exit(exit_code);
  }).detach();
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
