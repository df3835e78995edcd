// Points on a device's stream, for timing what the device itself did
// between two of them without the host waiting: on a GPU the host only
// queues work, so a wait the host times (for a batch, for an all-reduce)
// says nothing of the device's stall. A mark is a CUDA event with timing,
// recorded on the current stream; the time between two is read once both
// are reached, later (a step late), never by waiting. On the CPU there is
// nothing to mark: the host's own clock is the device's.
// Movable; a mark is not thread-safe.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

namespace scdino::training {

class DeviceMark {
 public:
  DeviceMark() = default;
  /// A mark on the current stream of `device` (a GPU); an empty one on the CPU.
  static DeviceMark Now(torch::Device device);
  /// Seconds the device spent from `from` to `to` once the device has
  /// reached both; nullopt before, and for empty marks. Never waits.
  static std::optional<double> Between(const DeviceMark& from, const DeviceMark& to);
  bool empty() const { return event_ == nullptr; }

 private:
  std::shared_ptr<void> event_;  // at::cuda::CUDAEvent (CUDA builds only)
};

}  // namespace scdino::training
