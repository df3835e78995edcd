#include "data/stream_handoff.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace scdino::data {

StreamHandoff StreamHandoff::Make(torch::Device device, const std::function<std::vector<torch::Tensor>()>& make) {
  StreamHandoff h;
#ifdef SCDINO_WITH_CUDA
  if (device.is_cuda()) {
    const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
    h.tensors_ = make();
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(c10::cuda::getCurrentCUDAStream(index));
    h.event_ = event;
    return h;
  }
#endif
  (void)device;
  h.tensors_ = make();
  return h;
}

std::vector<torch::Tensor> StreamHandoff::Take() {
#ifdef SCDINO_WITH_CUDA
  if (event_) {
    auto* event = static_cast<at::cuda::CUDAEvent*>(event_.get());
    const auto stream = c10::cuda::getCurrentCUDAStream();
    event->block(stream);
    for (const auto& t : tensors_) {
      if (t.defined() && t.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
    event_.reset();
  }
#endif
  return std::move(tensors_);
}

}  // namespace scdino::data
