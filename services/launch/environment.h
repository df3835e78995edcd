// Where a process of a run works: its CPU threads, its device (the GPU of
// its local rank, made current before any CUDA work) and its run directory
// (created, with temporaries of killed writers removed).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "launch/gpu_binding.h"
#include "launch/launch.h"
#include "launch/run_lock.h"

namespace scdino::run {

/// Once at a process's start, before any work: sets LibTorch's intra-op
/// threads to `threads` (0: all cores), sizes a linked OpenBLAS's pool to
/// the same count and turns scdino's CPU matrix products on or off
/// (scdino.cpu_gemm; model::ConfigureCpuGemm). Returns the thread count set.
int ConfigureCpu(int64_t threads, bool cpu_gemm = true);

/// For CPU training only: keeps freed memory in the process for reuse
/// (glibc's mmap threshold at its 32 MiB maximum, no trimming of the heap).
/// Every training step allocates and frees the same large tensors, and
/// memory handed back to the kernel costs a page fault per 4 KiB when
/// touched again (docs/performance.md). The price: the process's peak heap
/// is never returned, so feature extraction, evaluation and GPU runs, which
/// gain nothing from it, leave glibc's defaults. Returns the log phrase.
std::string KeepFreedMemoryForCpuTraining();

/// The device a process of the run computes on, and why (for its start-up
/// line).
struct DeviceChoice {
  torch::Device device = torch::kCPU;
  /// e.g. "scdino.device auto: no GPU visible" or
  /// "scdino.device cuda: GPU 2 of 4 (local rank 2), NVIDIA A100-SXM4-80GB".
  std::string why;
};

/// scdino.device for this process: the CPU, or the GPU of its local rank,
/// which becomes the current CUDA device; `auto` is the GPU when one is
/// visible, else the CPU. What it chose is this rank's alone (its
/// placement): the config keeps what the file says, and what depends on
/// the device (the precision) takes DeviceChoice::device.
/// Refuses, naming the config, the key and the counts: cuda where no GPU is
/// visible (or the build has no CUDA), more ranks on a node than it has
/// GPUs (rather than sharing one), and a GPU whose driver is older than the
/// build's CUDA needs. In an image that carries the cuDNN stand-in
/// (containers/cuda/local-packages.sh) cuDNN is switched off, and SDPA's
/// cuDNN backend with it: the model calls no cuDNN (the patch embedding and
/// the blur are matrix products).
StatusOr<DeviceChoice> PickDevice(const RunConfig& config, const LaunchInfo& launch);

/// What PickDevice decides from: the build and what the process sees.
struct DeviceFacts {
  bool cuda_build = false;   ///< compiled against a CUDA LibTorch
  int64_t visible_gpus = 0;  ///< torch::cuda::device_count()
  bool cudnn_stub = false;   ///< CudnnIsStub()
  /// The CUDA version the node's driver supports (cudaDriverGetVersion,
  /// 12040 for 12.4; 0: no driver) and the one this build runs on
  /// (cudaRuntimeGetVersion; 0 without CUDA), and the driver's own version
  /// ("550.54.15", from /proc/driver/nvidia/version; "" when unknown).
  int driver_cuda = 0, runtime_cuda = 0;
  std::string driver_version;
  /// What the environment binds this task to (GpuBindingFromEnv), or why
  /// it is wrong; without CUDA_VISIBLE_DEVICES the ranks of a node share
  /// what they see and rank i takes GPU i.
  StatusOr<GpuBinding> binding = GpuBinding{};
  /// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES as set (nullopt:
  /// unset), for the message that says why a bound GPU is not visible.
  std::optional<std::string> cuda_visible_devices, nvidia_visible_devices;
};
struct DeviceDecision {
  int64_t gpu = -1;  ///< the CUDA device index; -1: the CPU
  /// Switch cuDNN (and SDPA's cuDNN backend) off: the image carries the
  /// stand-in, not NVIDIA's cuDNN.
  bool cudnn_off = false;
  std::string why;
};
/// PickDevice's decision alone (no CUDA call), for any facts.
StatusOr<DeviceDecision> DecideDevice(const RunConfig& config, const LaunchInfo& launch, const DeviceFacts& facts);

/// What this program was built with and what it finds: LibTorch's version,
/// CUDA (compiled in or not, the GPUs visible), NCCL and cuDNN (NVIDIA's,
/// with its version, or the image's stand-in), one per line. For --version.
std::string DescribeBuild();

/// Whether the cuDNN this process loaded is the stand-in of an image built
/// without NVIDIA's (cudnnGetVersion() is 0). False in builds without CUDA.
bool CudnnIsStub();

/// The NVIDIA kernel module's version from `path` ("550.54.15"; the
/// "Kernel Module" line of /proc/driver/nvidia/version), "" when it cannot
/// be read.
std::string NvidiaDriverVersion(const std::string& path = "/proc/driver/nvidia/version");

/// "12.4" for 12040 (cudaDriverGetVersion's form).
std::string CudaVersionName(int version);

/// Whether `device` computes in bf16 (CUDA compute capability >= 8.0; the
/// CPU path trains in fp32 whatever this says).
bool DeviceSupportsBf16(torch::Device device);

/// Creates the run directory (mode scdino.run_dir_mode) or checks the one
/// that exists (yours, writable by no one else: CheckOwnPath), and removes
/// the temporaries killed writers left in it and in the file_sd directory.
Status PrepareRunDir(const RunConfig& config);

/// PrepareRunDir for a program that writes the run directory as one world
/// (the trainer): rank 0 takes <run_dir>/<service>.lock (LockRunDir) before
/// any temporary is removed, so a second world is refused before it touches
/// what the first is writing. Hold the lock until the end.
StatusOr<RunDirLock> PrepareRunDir(const RunConfig& config, const LaunchInfo& launch, const std::string& service);

/// The secret that binds a job's rendezvous keys (Coordinator::Connect):
/// <run_dir>/rendezvous.secret, 0600, created by whichever rank comes first
/// (LoadOrCreateSecret), so only the user's own processes know it.
StatusOr<std::string> RendezvousSecret(const RunConfig& config);

/// The ranks of the job meet (Coordinator::Connect) under the run's secret.
/// When rank 0 cannot serve the rendezvous (the port is taken: another
/// process may listen there and have learnt what the other ranks sent),
/// it replaces rendezvous.secret with a new one, saying so, so that the
/// next attempt shares nothing with this one, and ends PeerLost (the job is
/// requeued, on other ports). A store or rank silent past `timeout` is said
/// and tried once more, then PeerLost: a lost node is requeued, never taken
/// for bad input. Once `stopped` (a stop signal) says so, that failure at
/// once, never tried again.
StatusOr<std::shared_ptr<Coordinator>> Rendezvous(const RunConfig& config, const LaunchInfo& launch,
                                                  std::chrono::milliseconds timeout,
                                                  const std::function<bool()>& stopped = nullptr);

}  // namespace scdino::run
