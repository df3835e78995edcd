// Tensors made by one thread on a side stream of a CUDA device and handed to
// another thread's stream without the host waiting: the loader's prefetch
// threads cut the crops on streams of their own, beside the training step,
// and the step's stream waits for them on the device (an event), never the
// host. The memory of the handed tensors is recorded as used on the
// receiving stream, so the caching allocator does not give it back to the
// side stream while the step still reads it. On the CPU both are plain
// calls. One hand-off is made by one thread and taken by one other; the
// class is movable and not thread-safe.
//
// Which streams: a StreamProvider decides (CUDA's by default; tests inject
// one that records what was asked). Each worker cuts on one side stream of
// its own, the same for every batch: the caching allocator keeps freed
// blocks per stream, so a new stream per batch would make its reserved
// memory grow with the streams. The receiver waits on the current stream of
// the device the tensors were made on, not of whichever device is current.
#pragma once

#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace scdino::data {

/// Where a hand-off's streams come from. Called from the workers and the
/// receiving thread at once: implementations are thread-safe.
class StreamProvider {
 public:
  virtual ~StreamProvider() = default;
  /// The side stream worker `worker` cuts its batches on, on `device`: the
  /// same stream at every call for one (device, worker).
  virtual c10::Stream SideStream(torch::Device device, int worker) = 0;
  /// The stream the calling thread's work on `device` is queued on now.
  virtual c10::Stream CurrentStream(torch::Device device) = 0;
};

/// The real streams: for a CUDA device one stream of CUDA's pool per worker,
/// taken at its first call, and the device's current stream; for any other
/// device, its default stream (the calls are then plain).
std::shared_ptr<StreamProvider> DeviceStreams();

class StreamHandoff {
 public:
  StreamHandoff() = default;
  /// Runs `make` on this thread with `worker`'s side stream of `device`
  /// current, and records where that stream then is. On a stream that is
  /// not CUDA's, `make` just runs.
  static StreamHandoff Make(torch::Device device, int worker, StreamProvider& streams,
                            const std::function<std::vector<torch::Tensor>()>& make);
  /// On the receiving thread: the current stream of the device Make used
  /// waits for what Make queued (on the device), and the tensors are
  /// returned.
  std::vector<torch::Tensor> Take(StreamProvider& streams);

 private:
  std::vector<torch::Tensor> tensors_;
  torch::Device device_ = torch::kCPU;
  std::shared_ptr<void> event_;  // the side stream's event (CUDA builds only)
};

}  // namespace scdino::data
