// GPU memory of the CUDA caching allocator, for the epoch log, the metrics
// and scripts/gpu-check.sh. Builds without CUDA report nothing.
// Thread-safe (reads the allocator's counters).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace scdino::training {

struct DeviceMemory {
  int64_t allocated_bytes = 0;       ///< held by live tensors now
  int64_t reserved_bytes = 0;        ///< held by the caching allocator now
  int64_t peak_allocated_bytes = 0;  ///< since start or the last ResetPeakDeviceMemory
  int64_t total_bytes = 0;           ///< the device's memory
};

/// Empty for a CPU device or a build without CUDA.
std::optional<DeviceMemory> QueryDeviceMemory(torch::Device device);
void ResetPeakDeviceMemory(torch::Device device);

}  // namespace scdino::training
