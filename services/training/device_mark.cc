#include "training/device_mark.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace scdino::training {

DeviceMark DeviceMark::Now(torch::Device device) {
  DeviceMark m;
#ifdef SCDINO_WITH_CUDA
  if (device.is_cuda()) {
    auto event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);  // with timing
    event->record(c10::cuda::getCurrentCUDAStream(device.has_index() ? device.index() : -1));
    m.event_ = event;
  }
#endif
  (void)device;
  return m;
}

std::optional<double> DeviceMark::Between(const DeviceMark& from, const DeviceMark& to) {
#ifdef SCDINO_WITH_CUDA
  if (from.event_ && to.event_) {
    auto* a = static_cast<at::cuda::CUDAEvent*>(from.event_.get());
    auto* b = static_cast<at::cuda::CUDAEvent*>(to.event_.get());
    if (!a->query() || !b->query()) return std::nullopt;
    return std::max(0.0, static_cast<double>(a->elapsed_time(*b)) / 1000.0);
  }
#endif
  (void)from, (void)to;
  return std::nullopt;
}

}  // namespace scdino::training
