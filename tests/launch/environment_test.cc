// run::ConfigureCpu: the thread count LibTorch gets and the product switch,
// with the allocator left alone; KeepFreedMemoryForCpuTraining: freed large
// tensors reused from the heap instead of fresh mappings (counted as the
// process's minor page faults: each 4 KiB page of a fresh mapping faults on
// first touch). run::DecideDevice: the device every value of scdino.device gives
// for any GPU count, build and cuDNN (the refusals name the config and key).
// PrepareRunDir and CheckOwnPath: what a run on a shared file system
// refuses to trust; RendezvousSecret.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/files.h"
#include "common/safetensors.h"
#include "common/torch_compat.h"
#include "model/cpu_gemm.h"
#include "launch/environment.h"
#include "support/other_user.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

int64_t MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A step's worth of tensors written and freed, as activations and
// gradients are: ten of 1-10 MiB and ten of 24 MiB (295 MiB).
void OneStepOfLargeTensors() {
  std::vector<torch::Tensor> held;
  for (int64_t i = 0; i < 10; ++i) held.push_back(torch::empty({(i + 1) << 18}).fill_(1.0f));
  for (int i = 0; i < 10; ++i) held.push_back(torch::empty({6 << 20}).fill_(1.0f));
}

TEST(ConfigureCpu, SetsLibTorchThreadsAndTheProductSwitch) {
  EXPECT_EQ(ConfigureCpu(2, false), 2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  EXPECT_FALSE(model::CpuGemmEnabled());
  EXPECT_FALSE(model::HasCpuGemm());
  EXPECT_NE(model::CpuGemmDescription().find("LibTorch's own ops"), std::string::npos) << model::CpuGemmDescription();
  EXPECT_GE(ConfigureCpu(0, true), 1);
  EXPECT_TRUE(model::CpuGemmEnabled());
}

// Bytes in blocks glibc has mapped on their own (above its mmap threshold).
size_t MappedBytes() { return ::mallinfo2().hblkhd; }

// Each test runs in its own process (gtest_discover_tests): here glibc's
// defaults, which ConfigureCpu leaves alone (features, eval and GPU runs
// keep them): a large block is a mapping of its own, given back when freed.
TEST(ConfigureCpu, LeavesTheAllocatorAsItIs) {
  if (scdino::testing::kSanitizedAllocator) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's";
  ConfigureCpu(1);
  auto t = torch::empty({6 << 20}).fill_(1.0f);  // 24 MiB
  EXPECT_GE(MappedBytes(), size_t{24} << 20) << "the 24 MiB block came from the heap: something tuned the allocator";
}

TEST(KeepFreedMemoryForCpuTraining, FreedLargeTensorsAreReusedWithoutPageFaults) {
  if (scdino::testing::kSanitizedAllocator) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's";
  ConfigureCpu(1);
  EXPECT_NE(KeepFreedMemoryForCpuTraining().find("CPU training"), std::string::npos);
  {
    auto t = torch::empty({6 << 20}).fill_(1.0f);
    EXPECT_LT(MappedBytes(), size_t{24} << 20) << "a 24 MiB block is still a mapping of its own";
  }
  for (int warm_up = 0; warm_up < 6; ++warm_up) OneStepOfLargeTensors();
  const int64_t before = MinorFaults();
  OneStepOfLargeTensors();
  const int64_t faults = MinorFaults() - before;
  EXPECT_LT(faults, 1000) << "a step's tensors faulted " << faults << " pages in again";
}

RunConfig WithDevice(const std::string& device) {
  RunConfig c;
  c.source_path = "run.yaml";
  c.scdino.device = device;
  return c;
}

DeviceFacts Facts(bool cuda_build, int64_t gpus, bool stub = false) {
  DeviceFacts f;
  f.cuda_build = cuda_build;
  f.visible_gpus = gpus;
  f.cudnn_stub = stub;
  return f;
}

TEST(DecideDevice, CpuAndAutoWithoutAGpuRunOnTheCpuAndSayWhy) {
  LaunchInfo one;
  auto d = DecideDevice(WithDevice("cpu"), one, Facts(true, 0));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu, -1);
  EXPECT_EQ(d->why, "scdino.device cpu");
  d = DecideDevice(WithDevice("cpu"), one, Facts(true, 2));
  EXPECT_EQ(d->gpu, -1);
  EXPECT_EQ(d->why, "scdino.device cpu: 2 GPU(s) visible, not used");
  d = DecideDevice(WithDevice("auto"), one, Facts(true, 0));
  EXPECT_EQ(d->gpu, -1);
  EXPECT_EQ(d->why, "scdino.device auto: no GPU visible");
  d = DecideDevice(WithDevice("auto"), one, Facts(false, 0));
  EXPECT_EQ(d->why, "scdino.device auto: a build without CUDA");
}

TEST(DecideDevice, CudaWithoutAGpuIsRefusedNamingTheConfigAndKey) {
  LaunchInfo one;
  auto d = DecideDevice(WithDevice("cuda"), one, Facts(true, 0));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("run.yaml: scdino.device is cuda, but no GPU is visible"), std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("scdino.device: auto would run on the CPU"), std::string::npos);
  // It names the task and what Slurm gave it.
  EXPECT_NE(d.status().message().find("visible to task 0 (local rank 0); no GPU was bound to it"), std::string::npos)
      << d.status().message();
  d = DecideDevice(WithDevice("cuda"), one, Facts(false, 0));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("this build of scdino has no CUDA"), std::string::npos) << d.status().message();
}

// An image built with the cuDNN stand-in trains on a GPU with cuDNN and
// SDPA's cuDNN backend switched off (the model calls none), and says so.
TEST(DecideDevice, AGpuWithTheCudnnStandInRunsWithCudnnOff) {
  LaunchInfo one;
  for (const char* key : {"auto", "cuda"}) {
    DeviceFacts facts;
    facts.cuda_build = true;
    facts.visible_gpus = 1;
    facts.cudnn_stub = true;
    auto d = DecideDevice(WithDevice(key), one, facts);
    ASSERT_TRUE(d.ok()) << key << ": " << d.status().message();
    EXPECT_EQ(d->gpu, 0) << key;
    EXPECT_TRUE(d->cudnn_off) << key;
    EXPECT_NE(d->why.find("cuDNN off (this image carries its stand-in; the model calls none)"), std::string::npos)
        << d->why;
  }
  auto real = DecideDevice(WithDevice("cuda"), one, Facts(true, 1, /*stub=*/false));
  ASSERT_TRUE(real.ok());
  EXPECT_FALSE(real->cudnn_off);
  auto cpu = DecideDevice(WithDevice("cpu"), one, Facts(true, 1, /*stub=*/true));
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->gpu, -1);
  EXPECT_FALSE(cpu->cudnn_off);
}

// What PickDevice does with cudnn_off: both switches off in the process.
TEST(SwitchCudnnOff, TurnsCudnnAndSdpasCudnnBackendOff) {
  const bool was = compat::CudnnEnabled();
  compat::SwitchCudnnOff();
  EXPECT_FALSE(compat::CudnnEnabled());
  EXPECT_FALSE(compat::SdpaCudnnEnabled());
  at::globalContext().setUserEnabledCuDNN(was);
}

// A driver older than the build's CUDA major version is refused at start
// under auto and cuda, naming both versions (its GPUs look absent to CUDA,
// and auto would otherwise train on the CPU without a word); minor-version
// compatibility lets a 12.2 driver run a 12.4 build.
TEST(DecideDevice, ADriverOlderThanTheBuildNeedsIsRefusedNamingBothVersions) {
  LaunchInfo one;
  DeviceFacts old = Facts(true, 0);
  old.driver_cuda = 11080;
  old.runtime_cuda = 12040;
  old.driver_version = "520.61.05";
  for (const char* key : {"auto", "cuda"}) {
    auto d = DecideDevice(WithDevice(key), one, old);
    ASSERT_FALSE(d.ok()) << key;
    EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
    const std::string& m = d.status().message();
    EXPECT_NE(m.find("this node's NVIDIA driver 520.61.05 supports CUDA 11.8"), std::string::npos) << m;
    EXPECT_NE(m.find("it runs on CUDA 12.4, which needs a driver for CUDA 12.0 or later (R525 or newer)"),
              std::string::npos)
        << m;
  }
  EXPECT_TRUE(DecideDevice(WithDevice("cpu"), one, old).ok());
  DeviceFacts minor = Facts(true, 1);
  minor.driver_cuda = 12020;
  minor.runtime_cuda = 12040;
  auto d = DecideDevice(WithDevice("auto"), one, minor);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->gpu, 0);
}

TEST(NvidiaDriverVersion, ReadsTheKernelModulesVersion) {
  scdino::testing::ScratchDir dir;
  const std::string path = dir.file("version");
  ASSERT_TRUE(WriteFileAtomic(path,
                              "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                              "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
                  .ok());
  EXPECT_EQ(NvidiaDriverVersion(path), "550.54.15");
  EXPECT_EQ(NvidiaDriverVersion(dir.file("absent")), "");
  EXPECT_EQ(CudaVersionName(12040), "12.4");
}

TEST(DecideDevice, EachRankTakesItsGpuOrTheOneItIsBoundTo) {
  LaunchInfo rank2;
  rank2.local_rank = 2;
  rank2.local_world_size = 4;
  auto d = DecideDevice(WithDevice("auto"), rank2, Facts(true, 4));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu, 2);
  EXPECT_EQ(d->why, "scdino.device auto: GPU 2 of 4 (local rank 2)");
  // Bound to one GPU (srun --gpus-per-task=1): it is device 0.
  d = DecideDevice(WithDevice("cuda"), rank2, Facts(true, 1));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu, 0);
  // More ranks than GPUs on the node: refused with both counts.
  d = DecideDevice(WithDevice("cuda"), rank2, Facts(true, 2));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("this node runs 4 ranks but has 2 GPU(s)"), std::string::npos)
      << d.status().message();
}

// The binding Slurm's variables give (launch/gpu_binding.h) decides the device
// index; a task the job gave no GPU runs on the CPU under auto and is
// refused under cuda, naming the variables.
TEST(DecideDevice, TheEnvironmentsBindingDecidesTheGpu) {
  LaunchInfo rank1;
  rank1.local_rank = 1;
  rank1.local_world_size = 2;
  DeviceFacts f = Facts(true, 4);
  GpuBinding b;
  b.gpu_job = true;
  b.visible = {"0", "1", "2", "3"};
  b.device = 1;
  b.gpu = "1";
  b.why = "GPU 1 (entry 1 of CUDA_VISIBLE_DEVICES=0,1,2,3, by local rank)";
  f.binding = b;
  auto d = DecideDevice(WithDevice("cuda"), rank1, f);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->gpu, 1);
  EXPECT_EQ(d->why, "scdino.device cuda: GPU 1 (entry 1 of CUDA_VISIBLE_DEVICES=0,1,2,3, by local rank)");
  f.binding = Status::InvalidArgument("this task (local rank 1) was given no GPU (CUDA_VISIBLE_DEVICES unset)");
  d = DecideDevice(WithDevice("auto"), rank1, f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu, -1);
  EXPECT_NE(d->why.find("the CPU, since this task (local rank 1) was given no GPU"), std::string::npos) << d->why;
  d = DecideDevice(WithDevice("cuda"), rank1, f);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("was given no GPU"), std::string::npos);
}

// A task Slurm bound a GPU to that CUDA cannot see (a container without the
// NVIDIA hook, a CPU build) is refused under auto, naming both sides: what
// Slurm gave and what the task sees, and what to change; the CPU only on
// purpose (scdino.device: cpu). A task of a GPU job given no GPU (a step
// with --gres=none) and a CPU job stay on the CPU under auto.
TEST(DecideDevice, AutoRefusesAGpuSlurmBoundThatCudaCannotSee) {
  LaunchInfo one;
  GpuBinding bound;
  bound.gpu_job = true;
  bound.visible = {"3"};
  bound.device = 0;
  bound.gpu = "3";
  bound.why = "GPU 3 (CUDA_VISIBLE_DEVICES=3, the one this task was given)";
  for (const bool cuda_build : {true, false}) {
    for (const bool driver : {false, true}) {
      SCOPED_TRACE(std::string(cuda_build ? "CUDA build" : "CPU build") + (driver ? ", driver" : ", no driver"));
      DeviceFacts f = Facts(cuda_build, 0);
      f.binding = bound;
      f.cuda_visible_devices = "3";
      f.nvidia_visible_devices = std::nullopt;
      if (driver) f.driver_version = "550.54.15";
      auto d = DecideDevice(WithDevice("auto"), one, f);
      ASSERT_FALSE(d.ok()) << d->why;
      EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
      const std::string& m = d.status().message();
      EXPECT_NE(m.find("run.yaml: scdino.device is auto and Slurm bound GPU 3 (CUDA_VISIBLE_DEVICES=3, the one this "
                       "task was given) to task 0 (local rank 0), but no GPU is visible to it (CUDA_VISIBLE_DEVICES=3, "
                       "NVIDIA_VISIBLE_DEVICES unset, NVIDIA driver " +
                       std::string(driver ? "550.54.15" : "none found")),
                std::string::npos)
          << m;
      EXPECT_NE(m.find(!cuda_build ? "this build of scdino has no CUDA"
                       : driver    ? "CUDA sees no device"
                                   : "the NVIDIA hook did not mount it"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("set scdino.device: cpu"), std::string::npos) << m;
      f.binding = bound;
      EXPECT_TRUE(DecideDevice(WithDevice("cpu"), one, f).ok());
    }
  }
  // A step of the GPU job without a GPU of its own (--gres=none), and a CPU job.
  DeviceFacts step = Facts(true, 0);
  step.binding = Status::InvalidArgument("this task (local rank 0) was given no GPU (CUDA_VISIBLE_DEVICES unset)");
  auto d = DecideDevice(WithDevice("auto"), one, step);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->gpu, -1);
  d = DecideDevice(WithDevice("auto"), one, Facts(true, 0));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->why, "scdino.device auto: no GPU visible");
}

RunConfig RunIn(const std::string& out_dir, const std::string& extra = "") {
  auto c = ParseRunConfig("meta: {dataset_dir: /d, output_dir: \"" + out_dir + "\", name_of_run: r}\ntrain_scDINO: {}\n" +
                              extra,
                          "run.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return *c;
}

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// A run directory the service creates is 0750 (0700 by the config); one
// that others can write is refused at start, naming the path, its mode and
// the fix, before anything is read from it or written to it.
TEST(PrepareRunDir, CreatesItPrivateAndRefusesOneOthersCanWrite) {
  scdino::testing::ScratchDir d;
  ASSERT_TRUE(PrepareRunDir(RunIn(d.file("a"))).ok());
  EXPECT_EQ(ModeOf(d.file("a/r")), 0750u);
  ASSERT_TRUE(PrepareRunDir(RunIn(d.file("b"), "scdino: {run_dir_mode: \"0700\"}\n")).ok());
  EXPECT_EQ(ModeOf(d.file("b/r")), 0700u);
  ::chmod(d.file("a/r").c_str(), 0775);
  const Status s = PrepareRunDir(RunIn(d.file("a")));
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(d.file("a/r") + ": the run directory can be written by its group (mode 775)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("chmod go-w"), std::string::npos) << s.message();
  ::chmod(d.file("a/r").c_str(), 0755);  // existing and safe: kept as it is
  ASSERT_TRUE(PrepareRunDir(RunIn(d.file("a"))).ok());
  EXPECT_EQ(ModeOf(d.file("a/r")), 0755u);
}

// With several channel combinations each trains in a folder of its own
// under output_dir/name_of_run; a run an older scdino trained in that folder
// itself is refused with the commands that move it into its combination's
// folder (found by the channels its checkpoint's config trained), and
// nothing is created or moved until the user does so.
TEST(PrepareRunDir, ARunTrainedBeforeCombinationsHadFoldersIsRefusedWithTheMove) {
  scdino::testing::ScratchDir d;
  const std::string top = d.file("o/r");
  auto config = [&](const std::string& combos, int combination) {
    auto c = ParseRunConfig("meta: {dataset_dir: /d, output_dir: \"" + d.file("o") + "\", name_of_run: r, "
                            "channel_dict: {0: DAPI, 1: BF}, selected_channel_combination_per_run: " + combos + "}\n"
                            "scdino: {channel_combination: " + std::to_string(combination) + "}\n",
                            "run.yaml");
    if (!c.ok()) throw std::runtime_error(c.status().ToString());
    return *c;
  };
  // What the older scdino trained: entry 1 (BF), in output_dir/name_of_run.
  std::filesystem::create_directories(top);
  ASSERT_TRUE(WriteSafetensors(top + "/checkpoint.safetensors", {{"w", torch::zeros({2})}},
                               {{"config", config("[\"01\", \"1\"]", 1).source_text}})
                  .ok());
  for (int combination : {0, 1}) {
    const Status s = PrepareRunDir(config("[\"01\", \"1\"]", combination));
    ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find(top + " holds a run trained in it before each channel combination had a folder of its "
                               "own (" + top + "/checkpoint.safetensors, channels BF)"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("mv '" + top + "' '" + top + ".moving' && mkdir '" + top + "' && mv '" + top +
                               ".moving' '" + top + "/scDINO_ViT_channel_BF'"),
              std::string::npos)
        << s.message();
  }
  EXPECT_EQ(std::filesystem::directory_iterator(top)->path().filename(), "checkpoint.safetensors");
  EXPECT_FALSE(std::filesystem::exists(top + "/scDINO_ViT_channel_BF"));
  // A config none of whose combinations has those channels: moved away.
  const Status other = PrepareRunDir(config("[\"0\", \"01\"]", 0));
  EXPECT_NE(other.message().find("None of them has that run's channels: move it away (mv '" + top + "' '" + top +
                                 ".old')"),
            std::string::npos)
      << other.message();
  // One combination keeps output_dir/name_of_run: the run resumes there.
  EXPECT_TRUE(PrepareRunDir(config("[\"1\"]", 0)).ok());
  // Moved as told, the combination's run is found where it went.
  std::filesystem::rename(top, top + ".moving");
  std::filesystem::create_directories(top);
  std::filesystem::rename(top + ".moving", top + "/scDINO_ViT_channel_BF");
  const RunConfig moved = config("[\"01\", \"1\"]", 1);
  ASSERT_TRUE(PrepareRunDir(moved).ok());
  EXPECT_TRUE(FileExists(moved.run_dir() + "/checkpoint.safetensors")) << moved.run_dir();
}

// Another user's run directory is refused: as root, one given to `nobody`;
// as `nobody` (a child process that drops root), one that root owns.
TEST(PrepareRunDir, RefusesARunDirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user (CI runs as root)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  scdino::testing::ScratchDir d;
  std::filesystem::create_directories(d.file("x/r"));
  ::chmod(d.file("x").c_str(), 0777);  // the other user may create inside it
  if (scdino::testing::GiveToOtherUser(d.file("x/r"))) {
    const Status s = PrepareRunDir(RunIn(d.file("x")));
    ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("the run directory belongs to nobody (uid 65534), not to you (root (uid 0))"),
              std::string::npos)
        << s.message();
    ASSERT_EQ(::chown(d.file("x/r").c_str(), 0, 0), 0);
  }
  EXPECT_EXIT(
      {
        scdino::testing::BecomeOtherUserIfRoot();
        const Status s = PrepareRunDir(RunIn(d.file("x")));
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        std::exit(s.code() == StatusCode::kFailedPrecondition ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "the run directory belongs to root \\(uid 0\\), not to you");
}

// What a resume trusts: a file of the user's, writable by no one else.
TEST(CheckOwnPath, RefusesFilesOthersOwnOrCanWrite) {
  scdino::testing::ScratchDir d;
  ASSERT_TRUE(WriteFileAtomic(d.file("checkpoint.safetensors"), "weights").ok());
  EXPECT_TRUE(CheckOwnPath(d.file("checkpoint.safetensors"), "the checkpoint").ok());
  ::chmod(d.file("checkpoint.safetensors").c_str(), 0666);
  const Status w = CheckOwnPath(d.file("checkpoint.safetensors"), "the checkpoint");
  EXPECT_NE(w.message().find("the checkpoint can be written by every user (mode 666)"), std::string::npos)
      << w.message();
  EXPECT_EQ(CheckOwnPath(d.file("none"), "the checkpoint").code(), StatusCode::kNotFound);
}

// Every rank of a job agrees on one rendezvous secret, private to the user.
TEST(RendezvousSecret, IsCreatedOncePrivateAndSharedByTheRanks) {
  scdino::testing::ScratchDir d;
  const RunConfig c = RunIn(d.path());
  ASSERT_TRUE(PrepareRunDir(c).ok());
  auto a = RendezvousSecret(c);
  auto b = RendezvousSecret(c);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(ModeOf(c.run_dir() + "/rendezvous.secret"), 0600u);
}

}  // namespace
}  // namespace scdino::run
