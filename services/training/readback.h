// A step's values brought to the host without making the host wait for the
// device at once: on a GPU the copy goes into page-locked memory behind an
// event, queued after the step, and Get() waits for that event only (by
// then the device is busy with the next step); on the CPU it is the tensor
// itself. Not thread-safe; movable.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace scdino::training {

class Readback {
 public:
  Readback() = default;
  /// Queues the copy of `t` (on the current stream of its device).
  explicit Readback(const torch::Tensor& t);
  /// The values on the CPU; on a GPU, waits for the copy. Marked as a host
  /// synchronisation for OpCounter on every device (a GPU waits
  /// here), once per call.
  torch::Tensor Get();
  bool defined() const { return host_.defined(); }

 private:
  torch::Tensor host_;
  std::function<void()> wait_;  // set for a GPU copy
};

}  // namespace scdino::training
