// Ranks as threads of one test process: n coordinators over one in-process
// store, as rank 0 and the others meet over TCPStore in a real launch.
#pragma once

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "launch/coordinator.h"

namespace scdino::testing {

inline std::vector<std::shared_ptr<run::Coordinator>> Ranks(
    int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::shared_ptr<run::Coordinator>> out;
  for (int r = 0; r < n; ++r) out.push_back(run::Coordinator::OverStore(store, r, n, timeout));
  return out;
}

}  // namespace scdino::testing
