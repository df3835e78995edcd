// Tensors made by one thread on a side stream of a CUDA device and handed to
// another thread's stream without the host waiting: the loader's prefetch
// threads cut the crops on streams of their own, beside the training step,
// and the step's stream waits for them on the device (an event), never the
// host. The memory of the handed tensors is recorded as used on the
// receiving stream, so the caching allocator does not give it back to the
// side stream while the step still reads it. On the CPU both are plain
// calls. One hand-off is made by one thread and taken by one other; the
// class is movable and not thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace scdino::data {

class StreamHandoff {
 public:
  StreamHandoff() = default;
  /// Runs `make` on this thread with a side stream of `device` current (a
  /// CUDA device; the pool's streams, one per call at most), and records
  /// where the stream then is. On a CPU device `make` just runs.
  static StreamHandoff Make(torch::Device device, const std::function<std::vector<torch::Tensor>()>& make);
  /// On the receiving thread: its current stream waits for what Make
  /// queued (on the device), and the tensors are returned.
  std::vector<torch::Tensor> Take();

 private:
  std::vector<torch::Tensor> tensors_;
  std::shared_ptr<void> event_;  // the side stream's event (CUDA builds only)
};

}  // namespace scdino::data
