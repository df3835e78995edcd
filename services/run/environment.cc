#include "run/environment.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "common/env.h"
#include "common/files.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace scdino::run {

int ConfigureCpu(int64_t threads) {
  // Large blocks from the heap instead of fresh mappings (32 MiB is the most
  // glibc accepts; larger ones stay mappings), and the heap's free top kept
  // rather than returned to the kernel.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  int n = threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  // Matrix products run on the BLAS library's own thread pool, which
  // set_num_threads does not reach; OpenBLAS exposes a setter.
  using SetThreads = void (*)(int);
  if (auto* set_blas = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(n);
  return n;
}

StatusOr<torch::Device> PickDevice(const RunConfig& config, const LaunchInfo& launch) {
  if (config.scdino.device != "cuda") return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return Status::InvalidArgument(config.source_path + ": scdino.device is cuda, but no CUDA device is available "
                                   "(or this build's LibTorch has no CUDA)");
  }
  const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  // A task bound to its own GPU (srun --gpus-per-task=1, which the batch
  // scripts use; --gpu-bind) sees exactly that one: device 0. Otherwise the
  // ranks of a node share its GPUs and rank i takes GPU i.
  if (gpus == 1) {
#ifdef SCDINO_WITH_CUDA
    c10::cuda::set_device(0);
#endif
    return torch::Device(torch::kCUDA, 0);
  }
  if (launch.local_world_size > gpus || launch.local_rank >= gpus) {
    return Status::InvalidArgument(
        "this node runs " + std::to_string(std::max(launch.local_world_size, launch.local_rank + 1)) +
        " ranks but has " + std::to_string(gpus) + " GPU(s); scdino runs one rank per GPU: launch at most " +
        std::to_string(gpus) + " tasks per node (e.g. srun --ntasks-per-node=" + std::to_string(gpus) +
        " --gpus-per-task=1)");
  }
  const auto index = static_cast<c10::DeviceIndex>(launch.local_rank);
#ifdef SCDINO_WITH_CUDA
  // Before any CUDA work: otherwise every rank's context, NCCL
  // communicator and caching allocator start on GPU 0.
  c10::cuda::set_device(index);
#endif
  return torch::Device(torch::kCUDA, index);
}

bool DeviceSupportsBf16(torch::Device device) {
#ifdef SCDINO_WITH_CUDA
  if (device.is_cuda()) {
    const auto* props = at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0);
    return props->major >= 8;
  }
#endif
  (void)device;
  return true;
}

Status PrepareRunDir(const RunConfig& config) {
  if (auto s = MakeDirs(config.run_dir()); !s.ok()) return s;
  CleanStaleTemporaries(config.run_dir(), /*recursive=*/true);
  CleanStaleTemporaries(config.file_sd_dir(), /*recursive=*/false);
  return Status::Ok();
}

}  // namespace scdino::run
