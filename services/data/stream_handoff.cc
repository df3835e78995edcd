#include "data/stream_handoff.h"

#include <map>
#include <mutex>

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace scdino::data {
namespace {

class RealStreams : public StreamProvider {
 public:
  c10::Stream SideStream(torch::Device device, int worker) override {
#ifdef SCDINO_WITH_CUDA
    if (device.is_cuda()) {
      const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
      std::lock_guard<std::mutex> l(mu_);
      auto it = side_.find({index, worker});
      if (it == side_.end()) {
        it = side_.emplace(std::make_pair(index, worker),
                           c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index).unwrap()).first;
      }
      return it->second;
    }
#endif
    (void)worker;
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream CurrentStream(torch::Device device) override {
#ifdef SCDINO_WITH_CUDA
    if (device.is_cuda()) {
      return c10::cuda::getCurrentCUDAStream(device.has_index() ? device.index() : c10::cuda::current_device())
          .unwrap();
    }
#endif
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

 private:
  std::mutex mu_;
  std::map<std::pair<c10::DeviceIndex, int>, c10::Stream> side_;  // guarded by mu_
};

}  // namespace

std::shared_ptr<StreamProvider> DeviceStreams() { return std::make_shared<RealStreams>(); }

StreamHandoff StreamHandoff::Make(torch::Device device, int worker, StreamProvider& streams,
                                  const std::function<std::vector<torch::Tensor>()>& make) {
  StreamHandoff h;
  h.device_ = device;
  const c10::Stream side = streams.SideStream(device, worker);
#ifdef SCDINO_WITH_CUDA
  if (side.device_type() == c10::DeviceType::CUDA) {
    const c10::cuda::CUDAStream stream(c10::cuda::CUDAStream::UNCHECKED, side);
    c10::cuda::CUDAStreamGuard guard(stream);
    h.tensors_ = make();
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(stream);
    h.event_ = event;
    return h;
  }
#endif
  (void)side;
  h.tensors_ = make();
  return h;
}

std::vector<torch::Tensor> StreamHandoff::Take(StreamProvider& streams) {
  const c10::Stream current = streams.CurrentStream(device_);
#ifdef SCDINO_WITH_CUDA
  if (event_ && current.device_type() == c10::DeviceType::CUDA) {
    const c10::cuda::CUDAStream stream(c10::cuda::CUDAStream::UNCHECKED, current);
    static_cast<at::cuda::CUDAEvent*>(event_.get())->block(stream);
    for (const auto& t : tensors_) {
      if (t.defined() && t.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
  }
#endif
  (void)current;
  event_.reset();
  return std::move(tensors_);
}

}  // namespace scdino::data
