#include "run/environment.h"

#include <malloc.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "common/torch_compat.h"
#include "model/cpu_gemm.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif
#ifdef SCDINO_WITH_NCCL
#include <nccl.h>
#endif
#ifdef SCDINO_WITH_CUDNN
// The one cuDNN call scdino makes itself, declared as cuDNN 9's cudnn.h
// does (the headers are not always installed beside the library).
extern "C" size_t cudnnGetVersion(void);
#endif

namespace scdino::run {

int ConfigureCpu(int64_t threads, bool cpu_gemm) {
  const int n =
      threads > 0 ? static_cast<int>(threads) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  model::ConfigureCpuGemm(n, cpu_gemm);
  return n;
}

std::string KeepFreedMemoryForCpuTraining() {
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  return "freed memory kept for reuse (CPU training: mmap threshold 32 MiB, no heap trimming)";
}

namespace {

#ifdef SCDINO_WITH_CUDA
std::string GpuName(int64_t index) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->name;
}
#endif

}  // namespace

bool CudnnIsStub() {
#ifdef SCDINO_WITH_CUDNN
  return cudnnGetVersion() == 0;
#else
  return false;
#endif
}

std::string DescribeBuild() {
  std::string d = std::string("LibTorch ") + compat::TorchVersion();
#ifdef SCDINO_WITH_CUDA
  d += ", CUDA " + std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) + " compiled in";
#ifdef SCDINO_WITH_NCCL
  d += ", NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  d += ", no NCCL";
#endif
#ifdef SCDINO_WITH_CUDNN
  const size_t v = cudnnGetVersion();
  d += v == 0 ? std::string("\ncuDNN: the image's stand-in (no NVIDIA cuDNN): cannot run on a GPU; docs/containers.md")
              : "\ncuDNN " + std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
                    std::to_string(v % 100);
#endif
  const int64_t gpus = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  d += "\nGPUs visible: " + std::to_string(gpus);
  for (int64_t i = 0; i < gpus; ++i) d += (i ? ", " : " (") + GpuName(i) + (i + 1 == gpus ? ")" : "");
#else
  d += ", CPU only (built without CUDA)";
#endif
  return d + "\nCPU matrix products: " + model::CpuGemmDescription();
}

StatusOr<DeviceDecision> DecideDevice(const RunConfig& config, const LaunchInfo& launch, const DeviceFacts& facts) {
  const std::string& key = config.scdino.device;
  const int64_t gpus = facts.visible_gpus;
  DeviceDecision d;
  if (key == "cpu") {
    d.why = "scdino.device cpu" + (gpus > 0 ? ": " + std::to_string(gpus) + " GPU(s) visible, not used" : std::string());
    return d;
  }
  if (key == "auto" && gpus == 0) {
    d.why = std::string("scdino.device auto: ") + (facts.cuda_build ? "no GPU visible" : "a build without CUDA");
    return d;
  }
  if (gpus == 0) {
    return Status::InvalidArgument(
        config.source_path + ": scdino.device is cuda, but " +
        (facts.cuda_build ? std::string("no GPU is visible to this process (CUDA_VISIBLE_DEVICES, srun --gpus-per-task, "
                                        "the container's NVIDIA hook); scdino.device: auto would run on the CPU")
                          : std::string("this build of scdino has no CUDA (a CPU LibTorch); use the GPU image "
                                        "(scripts/build-image.sh --cuda) or scdino.device: cpu")));
  }
  if (facts.cudnn_stub) {
    return Status::FailedPrecondition(
        config.source_path + ": scdino.device is " + key + " and " + std::to_string(gpus) +
        " GPU(s) are visible, but this image carries a stand-in for cuDNN, not NVIDIA's (built with --cudnn stub, "
        "where NVIDIA's site was unreachable): it would fail in the first cuDNN call. Rebuild the image with "
        "scripts/build-image.sh --cuda --cudnn download (or --cudnn archive=FILE), or set scdino.device: cpu "
        "(docs/containers.md)");
  }
  // The GPU the environment binds this task to (run/gpu_binding.h): the one
  // it was given (srun --gpus-per-task=1, which the batch scripts use), or
  // its local rank's entry of a list its node's tasks share.
  if (!facts.binding.ok()) {
    // auto on a task the job gave no GPU (a follower step with --gres=none
    // on a node without device cgroups, which still sees every GPU): the CPU.
    if (key == "auto") {
      d.why = "scdino.device auto: the CPU, since " + facts.binding.status().message();
      return d;
    }
    return facts.binding.status();
  }
  if (facts.binding->device >= 0) {
    if (facts.binding->device >= gpus) {
      return Status::InvalidArgument("this task is bound to " + facts.binding->why + " but sees " +
                                     std::to_string(gpus) + " GPU(s)");
    }
    d.gpu = facts.binding->device;
    d.why = "scdino.device " + key + ": " + facts.binding->why;
    return d;
  }
  if (gpus == 1) {
    d.gpu = 0;
    d.why = "scdino.device " + key + ": the one GPU visible";
    return d;
  }
  if (launch.local_world_size > gpus || launch.local_rank >= gpus) {
    return Status::InvalidArgument(
        "this node runs " + std::to_string(std::max(launch.local_world_size, launch.local_rank + 1)) +
        " ranks but has " + std::to_string(gpus) + " GPU(s); scdino runs one rank per GPU: launch at most " +
        std::to_string(gpus) + " tasks per node (e.g. srun --ntasks-per-node=" + std::to_string(gpus) +
        " --gpus-per-task=1)");
  }
  d.gpu = launch.local_rank;
  d.why = "scdino.device " + key + ": GPU " + std::to_string(launch.local_rank) + " of " + std::to_string(gpus) +
          " (local rank " + std::to_string(launch.local_rank) + ")";
  return d;
}

StatusOr<DeviceChoice> PickDevice(RunConfig& config, const LaunchInfo& launch) {
  DeviceFacts facts;
#ifdef SCDINO_WITH_CUDA
  facts.cuda_build = true;
#endif
  facts.visible_gpus = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  facts.cudnn_stub = CudnnIsStub();
  facts.binding = GpuBindingFromEnv([](const char* k) { return std::getenv(k); }, launch.local_rank);
  auto d = DecideDevice(config, launch, facts);
  if (!d.ok()) return d.status();
  DeviceChoice c;
  c.why = d->why;
  config.scdino.device = d->gpu < 0 ? "cpu" : "cuda";
  if (d->gpu < 0) return c;
#ifdef SCDINO_WITH_CUDA
  const auto index = static_cast<c10::DeviceIndex>(d->gpu);
  // Before any CUDA work: otherwise every rank's context, NCCL
  // communicator and caching allocator start on GPU 0.
  c10::cuda::set_device(index);
  c.device = torch::Device(torch::kCUDA, index);
  c.why += ", " + GpuName(index);
  return c;
#else
  return Status::Internal("a GPU is visible but this build has no CUDA code");
#endif
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
  const int mode = config.scdino.run_dir_mode == "0700" ? 0700 : 0750;
  if (auto s = MakeOwnDir(config.run_dir(), mode, "the run directory"); !s.ok()) return s;
  CleanStaleTemporaries(config.run_dir(), /*recursive=*/true);
  CleanStaleTemporaries(config.file_sd_dir(), /*recursive=*/false);
  return Status::Ok();
}

StatusOr<std::string> RendezvousSecret(const RunConfig& config) {
  return LoadOrCreateSecret(config.run_dir() + "/rendezvous.secret", "the run's rendezvous secret");
}

StatusOr<std::shared_ptr<Coordinator>> Rendezvous(const RunConfig& config, const LaunchInfo& launch,
                                                  std::chrono::milliseconds timeout) {
  auto secret = RendezvousSecret(config);
  if (!secret.ok()) return secret.status();
  auto coordinator = Coordinator::Connect(launch, timeout, *secret);
  if (coordinator.ok() || launch.rank != 0 || coordinator.status().code() != StatusCode::kUnavailable) {
    return coordinator;
  }
  const std::string path = config.run_dir() + "/rendezvous.secret";
  const Status rotated = WriteFileAtomic(path, NewSecret() + "\n", 0600);
  std::cerr << "scdino: rendezvous: rank 0 could not serve the rendezvous at " << launch.master_addr << ":"
            << launch.master_port << "; another process may hold the port and have heard the other ranks: "
            << (rotated.ok() ? "the run's rendezvous secret is replaced (" + path + "), so the next attempt shares "
                               "nothing with this one"
                             : "replacing " + path + " failed too (" + rotated.message() + ")")
            << "\n";
  return coordinator;
}

}  // namespace scdino::run
