// Sends a stop signal to this process and waits until its handler ran: the
// handler runs on the services' signal thread (process/signals.h), not on
// the thread that sent it, so a test must wait before looking at the effect.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "process/signals.h"

namespace scdino::testing {

/// False when the signal was not handled within 5 s.
inline bool SendStopSignal(int sig) {
  const int before = process::StopSignalsHandled();
  if (::kill(::getpid(), sig) != 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (process::StopSignalsHandled() == before) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace scdino::testing
