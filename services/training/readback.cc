#include "training/readback.h"

#include "common/op_count.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#endif

namespace scdino::training {

Readback::Readback(const torch::Tensor& t) {
#ifdef SCDINO_WITH_CUDA
  if (t.is_cuda()) {
    host_ = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
    host_.copy_(t, /*non_blocking=*/true);
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    wait_ = [event] { event->synchronize(); };
    return;
  }
#endif
  host_ = t;
}

torch::Tensor Readback::Get() {
  // Marked on the CPU too: where a GPU run waits.
  HostWaitScope wait;
  if (wait_) {
    wait_();
    wait_ = nullptr;
  }
  return host_;
}

}  // namespace scdino::training
