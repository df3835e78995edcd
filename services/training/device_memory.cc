#include "training/device_memory.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace scdino::training {

std::optional<DeviceMemory> QueryDeviceMemory(torch::Device device) {
#ifdef SCDINO_WITH_CUDA
  if (device.is_cuda()) {
    // Index 0 of each statistic is the aggregate over pool kinds in every
    // LibTorch version.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
    DeviceMemory m;
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    m.total_bytes = static_cast<int64_t>(
        at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->totalGlobalMem);
    return m;
  }
#endif
  (void)device;
  return std::nullopt;
}

void ResetPeakDeviceMemory(torch::Device device) {
#ifdef SCDINO_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.has_index() ? device.index() : 0);
#endif
  (void)device;
}

}  // namespace scdino::training
