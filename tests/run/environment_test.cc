// run::ConfigureCpu: the thread count LibTorch gets and the product switch,
// with the allocator left alone; KeepFreedMemoryForCpuTraining: freed large
// tensors reused from the heap instead of fresh mappings (counted as the
// process's minor page faults: each 4 KiB page of a fresh mapping faults on
// first touch). run::DecideDevice: the device every value of scdino.device gives
// for any GPU count, build and cuDNN (the refusals name the config and key).
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include "model/cpu_gemm.h"
#include "run/environment.h"

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
  ConfigureCpu(1);
  auto t = torch::empty({6 << 20}).fill_(1.0f);  // 24 MiB
  EXPECT_GE(MappedBytes(), size_t{24} << 20) << "the 24 MiB block came from the heap: something tuned the allocator";
}

TEST(KeepFreedMemoryForCpuTraining, FreedLargeTensorsAreReusedWithoutPageFaults) {
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
  d = DecideDevice(WithDevice("cuda"), one, Facts(false, 0));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("this build of scdino has no CUDA"), std::string::npos) << d.status().message();
}

// An image built with the cuDNN stand-in refuses a GPU at start, whatever
// the key, instead of failing in its first cuDNN call; the CPU stays open.
TEST(DecideDevice, AGpuWithTheCudnnStandInIsRefused) {
  LaunchInfo one;
  for (const char* key : {"auto", "cuda"}) {
    auto d = DecideDevice(WithDevice(key), one, Facts(true, 1, /*stub=*/true));
    ASSERT_FALSE(d.ok()) << key;
    EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(d.status().message().find("run.yaml: scdino.device is " + std::string(key) + " and 1 GPU(s) are visible, "
                                        "but this image carries a stand-in for cuDNN"),
              std::string::npos)
        << d.status().message();
    EXPECT_NE(d.status().message().find("--cudnn download"), std::string::npos);
  }
  auto cpu = DecideDevice(WithDevice("cpu"), one, Facts(true, 1, /*stub=*/true));
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->gpu, -1);
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

}  // namespace
}  // namespace scdino::run
