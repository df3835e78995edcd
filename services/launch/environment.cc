#include "launch/environment.h"

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <regex>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "common/safetensors.h"
#include "common/torch_compat.h"
#include "model/cpu_gemm.h"

#ifdef SCDINO_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
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

std::string NvidiaDriverVersion(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  static const std::regex kModule(R"(Kernel Module\s+([0-9]+(\.[0-9]+)+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kModule)) return m[1];
  }
  return "";
}

std::string CudaVersionName(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

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
  d += v == 0 ? std::string("\ncuDNN: the image's stand-in (no NVIDIA cuDNN): switched off on a GPU, where the model "
                            "calls none (docs/containers.md)")
              : "\ncuDNN " + std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
                    std::to_string(v % 100);
#endif
  int driver = 0;
  cudaDriverGetVersion(&driver);
  const std::string module = NvidiaDriverVersion();
  d += driver == 0 ? std::string("\nNVIDIA driver: none found")
                   : "\nNVIDIA driver" + (module.empty() ? std::string() : " " + module) + " (CUDA " +
                         CudaVersionName(driver) + ")";
  const int64_t gpus = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  d += "\nGPUs visible: " + std::to_string(gpus);
  for (int64_t i = 0; i < gpus; ++i) d += (i ? ", " : " (") + GpuName(i) + (i + 1 == gpus ? ")" : "");
#else
  d += ", CPU only (built without CUDA)";
#endif
  return d + "\nCPU matrix products: " + model::CpuGemmDescription();
}

namespace {

// A driver too old for this build's CUDA: its GPUs look absent to CUDA
// (auto would quietly train on the CPU), so it is said first, with both
// versions. CUDA's minor-version compatibility runs a 12.x build on any
// driver for 12.0 or later.
Status DriverTooOld(const RunConfig& config, const DeviceFacts& facts) {
  const std::string& key = config.scdino.device;
  return Status::FailedPrecondition(
      config.source_path + ": scdino.device is " + key + ", but this node's NVIDIA driver" +
      (facts.driver_version.empty() ? std::string() : " " + facts.driver_version) + " supports CUDA " +
      CudaVersionName(facts.driver_cuda) + ", older than this build needs: it runs on CUDA " +
      CudaVersionName(facts.runtime_cuda) + ", which needs a driver for CUDA " +
      std::to_string(facts.runtime_cuda / 1000) + ".0 or later" +
      (facts.runtime_cuda / 1000 == 12 ? std::string(" (R525 or newer)") : std::string()) +
      ". Update the node's driver, use an image built for CUDA " + CudaVersionName(facts.driver_cuda) +
      " (containers/Dockerfile.cuda-ngc with an older base), or set scdino.device: cpu");
}

// auto on a task Slurm bound a GPU that CUDA cannot see: what was seen and
// what to change.
Status BoundGpuNotVisible(const RunConfig& config, const DeviceFacts& facts, const std::string& task) {
  const auto shown = [](const char* name, const std::optional<std::string>& v) {
    return std::string(name) + (v ? "=" + *v : std::string(" unset"));
  };
  std::string seen = shown("CUDA_VISIBLE_DEVICES", facts.cuda_visible_devices) + ", " +
                     shown("NVIDIA_VISIBLE_DEVICES", facts.nvidia_visible_devices) + ", NVIDIA driver " +
                     (facts.driver_version.empty() ? std::string("none found (no /proc/driver/nvidia/version)")
                                                   : facts.driver_version);
  std::string change;
  if (!facts.cuda_build) {
    change = "this build of scdino has no CUDA (a CPU LibTorch): run the GPU image (scripts/build-image.sh --cuda; "
             "srun --container-image=IMAGE.sqsh)";
  } else if (facts.driver_version.empty()) {
    change = "no NVIDIA driver is visible to the task: in a container, the NVIDIA hook did not mount it (Enroot's "
             "98-nvidia.sh and nvidia-container-cli; NVIDIA_VISIBLE_DEVICES must not be void or unset); "
             "outside one, the node's driver is not loaded";
  } else {
    change = "the driver is there but CUDA sees no device: check that CUDA_VISIBLE_DEVICES names a GPU of this "
             "node (Slurm's gres.conf) and that the container sees /dev/nvidia*";
  }
  return Status::InvalidArgument(config.source_path + ": scdino.device is auto and Slurm bound " +
                                 facts.binding->why + " to " + task + ", but no GPU is visible to it (" + seen +
                                 "); " + change +
                                 ". A GPU job does not train on the CPU without an error: to do so on purpose, "
                                 "set scdino.device: cpu");
}

// cuda with no GPU visible, or in a build without CUDA.
Status CudaWithoutGpu(const RunConfig& config, const DeviceFacts& facts, const std::string& task) {
  const std::string given = !facts.binding.ok() ? facts.binding.status().message()
                            : facts.binding->device >= 0 ? "Slurm bound it " + facts.binding->why
                                                         : std::string("no GPU was bound to it (CUDA_VISIBLE_DEVICES unset)");
  return Status::InvalidArgument(
      config.source_path + ": scdino.device is cuda, but " +
      (facts.cuda_build ? "no GPU is visible to " + task + "; " + given +
                              " (srun --gpus-per-task, the container's NVIDIA hook); scdino.device: auto would run on "
                              "the CPU"
                        : std::string("this build of scdino has no CUDA (a CPU LibTorch); use the GPU image "
                                      "(scripts/build-image.sh --cuda) or scdino.device: cpu")));
}

// The GPU of this task among the `facts.visible_gpus` visible: the one the
// environment bound it to (launch/gpu_binding.h: srun --gpus-per-task=1,
// which the batch scripts use), the only one, or its local rank's.
StatusOr<DeviceDecision> PickGpu(const std::string& key, const LaunchInfo& launch, const DeviceFacts& facts,
                                 const std::string& cudnn, DeviceDecision d) {
  const int64_t gpus = facts.visible_gpus;
  if (facts.binding->device >= 0) {
    if (facts.binding->device >= gpus) {
      return Status::InvalidArgument("this task is bound to " + facts.binding->why + " but sees " +
                                     std::to_string(gpus) + " GPU(s)");
    }
    d.gpu = facts.binding->device;
    d.why = "scdino.device " + key + ": " + facts.binding->why + cudnn;
    return d;
  }
  if (gpus == 1) {
    d.gpu = 0;
    d.why = "scdino.device " + key + ": the one GPU visible" + cudnn;
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
          " (local rank " + std::to_string(launch.local_rank) + ")" + cudnn;
  return d;
}

}  // namespace

StatusOr<DeviceDecision> DecideDevice(const RunConfig& config, const LaunchInfo& launch, const DeviceFacts& facts) {
  const std::string& key = config.scdino.device;
  const int64_t gpus = facts.visible_gpus;
  DeviceDecision d;
  if (key == "cpu") {
    d.why = "scdino.device cpu" + (gpus > 0 ? ": " + std::to_string(gpus) + " GPU(s) visible, not used" : std::string());
    return d;
  }
  // A driver too old for this build's CUDA: said first (DriverTooOld).
  if (facts.driver_cuda > 0 && facts.runtime_cuda > 0 && facts.driver_cuda / 1000 < facts.runtime_cuda / 1000) {
    return DriverTooOld(config, facts);
  }
  const std::string task = "task " + std::to_string(launch.rank) + " (local rank " + std::to_string(launch.local_rank) + ")";
  // auto means the GPU Slurm bound: a task given one that CUDA cannot see
  // (a container without the NVIDIA hook, a wrong NVIDIA_VISIBLE_DEVICES,
  // a CPU build) must not train on the CPU, a hundred times slower, without
  // an error. A task given none (a CPU job, a step with --gres=none) stays
  // on the CPU.
  if (key == "auto" && gpus == 0 && facts.binding.ok() && facts.binding->gpu_job && facts.binding->device >= 0) {
    return BoundGpuNotVisible(config, facts, task);
  }
  if (key == "auto" && gpus == 0) {
    d.why = std::string("scdino.device auto: ") + (facts.cuda_build ? "no GPU visible" : "a build without CUDA");
    if (facts.binding.ok() && facts.binding->device >= 0) d.why += " (CUDA_VISIBLE_DEVICES names " + facts.binding->gpu + " outside a Slurm GPU job)";
    return d;
  }
  if (gpus == 0) return CudaWithoutGpu(config, facts, task);
  // The image carries the stand-in for cuDNN: nothing of the model needs
  // cuDNN, which is switched off (and SDPA's cuDNN backend with it).
  d.cudnn_off = facts.cudnn_stub;
  const std::string cudnn = facts.cudnn_stub ? "; cuDNN off (this image carries its stand-in; the model calls none)" : "";
  if (!facts.binding.ok()) {
    // auto on a task the job gave no GPU (a follower step with --gres=none
    // on a node without device cgroups, which still sees every GPU): the CPU.
    if (key == "auto") {
      d.why = "scdino.device auto: the CPU, since " + facts.binding.status().message();
      d.cudnn_off = false;
      return d;
    }
    return facts.binding.status();
  }
  return PickGpu(key, launch, facts, cudnn, d);
}

StatusOr<DeviceChoice> PickDevice(const RunConfig& config, const LaunchInfo& launch) {
  DeviceFacts facts;
#ifdef SCDINO_WITH_CUDA
  facts.cuda_build = true;
#endif
#ifdef SCDINO_WITH_CUDA
  cudaDriverGetVersion(&facts.driver_cuda);
  cudaRuntimeGetVersion(&facts.runtime_cuda);
#endif
  facts.driver_version = NvidiaDriverVersion();
  facts.visible_gpus = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  facts.cudnn_stub = CudnnIsStub();
  facts.binding = GpuBindingFromEnv([](const char* k) { return std::getenv(k); }, launch.local_rank);
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) facts.cuda_visible_devices = v;
  if (const char* v = std::getenv("NVIDIA_VISIBLE_DEVICES")) facts.nvidia_visible_devices = v;
  auto d = DecideDevice(config, launch, facts);
  if (!d.ok()) return d.status();
  DeviceChoice c;
  c.why = d->why;
  if (d->gpu < 0) return c;
#ifdef SCDINO_WITH_CUDA
  if (d->cudnn_off) compat::SwitchCudnnOff();
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

namespace {
// A temporary of another node untouched for this long before an attempt
// starts is an earlier attempt's: a live writer appends to it far more often.
constexpr auto kForeignTemporaryAge = std::chrono::minutes(5);

// With several channel combinations each trains in a folder of its own
// under output_dir/name_of_run. A run an older scdino trained in that
// folder itself (one combination) is refused, with the commands that move
// it where this config finds it: never trained over nor left unseen.
Status CheckRunLayout(const RunConfig& config) {
  const auto& combos = config.meta.selected_channel_combination_per_run;
  const std::string top = config.name_of_run_dir();
  const std::string old = top + "/checkpoint.safetensors";
  if (combos.size() < 2 || !FileExists(old)) return Status::Ok();
  std::string dir, channels = "channels it does not record";
  auto meta = ReadSafetensorsMetadata(old);
  auto named = meta.ok() && meta->count("config") ? NamedChannelsOf(meta->at("config"), old)
                                                   : StatusOr<std::vector<std::pair<int64_t, std::string>>>(meta.status());
  if (named.ok()) {
    std::vector<int64_t> indices;
    channels = "channels";
    for (const auto& [index, name] : *named) {
      indices.push_back(index);
      channels += " " + name;
    }
    for (size_t i = 0; i < combos.size(); ++i) {
      if (combos[i] == indices) dir = config.combination_dir(static_cast<int64_t>(i));
    }
  }
  std::string m = top + " holds a run trained in it before each channel combination had a folder of its own (" +
                  old + ", " + channels + "); this config trains each of its " + std::to_string(combos.size()) +
                  " combinations in a folder under it. ";
  if (dir.empty()) {
    return Status::FailedPrecondition(m + "None of them has that run's channels: move it away (mv '" + top + "' '" +
                                      top + ".old') or give this config another meta.name_of_run");
  }
  return Status::FailedPrecondition(m + "Move that run into its combination's folder, then start again:\n  mv '" + top +
                                    "' '" + top + ".moving' && mkdir '" + top + "' && mv '" + top + ".moving' '" + top +
                                    "/" + dir + "'");
}

Status MakeRunDir(const RunConfig& config) {
  if (auto s = CheckRunLayout(config); !s.ok()) return s;
  const int mode = config.scdino.run_dir_mode == "0700" ? 0700 : 0750;
  return MakeOwnDir(config.run_dir(), mode, "the run directory");
}
void CleanRunDir(const RunConfig& config, std::optional<std::filesystem::file_time_type> foreign_before = {}) {
  CleanStaleTemporaries(config.run_dir(), /*recursive=*/true, Env::Default(), foreign_before);
  CleanStaleTemporaries(config.file_sd_dir(), /*recursive=*/false);
}
}  // namespace

Status PrepareRunDir(const RunConfig& config) {
  if (auto s = MakeRunDir(config); !s.ok()) return s;
  CleanRunDir(config);
  return Status::Ok();
}

StatusOr<RunDirLock> PrepareRunDir(const RunConfig& config, const LaunchInfo& launch, const std::string& service) {
  if (auto s = MakeRunDir(config); !s.ok()) return s;
  auto lock = LockRunDir(config.run_dir(), service, launch, std::chrono::seconds(60), &std::cerr);
  if (!lock.ok()) return lock.status();
  // Only once no other world writes here; holding the directory, rank 0
  // also removes what writers of earlier attempts left on other nodes
  // (untouched for kForeignTemporaryAge before this attempt).
  CleanRunDir(config, lock->held() ? std::optional(std::filesystem::file_time_type::clock::now() - kForeignTemporaryAge)
                                   : std::nullopt);
  return lock;
}

StatusOr<std::string> RendezvousSecret(const RunConfig& config) {
  return LoadOrCreateSecret(config.run_dir() + "/rendezvous.secret", "the run's rendezvous secret");
}

StatusOr<std::shared_ptr<Coordinator>> Rendezvous(const RunConfig& config, const LaunchInfo& launch,
                                                  std::chrono::milliseconds timeout,
                                                  const std::function<bool()>& stopped) {
  for (int tries = 1;; ++tries) {
    auto secret = RendezvousSecret(config);  // read again: rank 0 may have replaced it
    if (!secret.ok()) return secret.status();
    auto coordinator = Coordinator::Connect(launch, timeout, *secret, stopped);
    if (coordinator.ok() || coordinator.status().code() != StatusCode::kUnavailable) return coordinator;
    const std::string why = coordinator.status().message();
    if (stopped && stopped()) return coordinator.status();  // a stop: never tried again
    if (launch.rank == 0 && why.find("cannot listen on") != std::string::npos) {
      // Another process may listen on the port and have heard the other
      // ranks: the next attempt shares nothing with this one.
      const std::string path = config.run_dir() + "/rendezvous.secret";
      const Status rotated = WriteFileAtomic(path, NewSecret() + "\n", 0600);
      return Status::PeerLost(
          why + "; another process may hold the port and have heard the other ranks: " +
          (rotated.ok() ? "the run's rendezvous secret is replaced (" + path + "), so the next attempt shares nothing "
                          "with this one"
                        : "replacing " + path + " failed too (" + rotated.message() + ")") +
          "; the job is requeued, and a requeue takes other ports");
    }
    // A store or a rank silent past the bound: once more, then the job is
    // requeued (a node may be lost), never ended as bad input.
    if (tries == 2) return Status::PeerLost(why + " (a second time): the job is requeued");
    std::cerr << "scdino: rendezvous: " << why << "; trying once more (" << timeout.count() / 1000 << " s)\n";
  }
}

}  // namespace scdino::run
