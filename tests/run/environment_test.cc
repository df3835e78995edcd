// run::ConfigureCpu: the thread count LibTorch gets, and freed large tensors
// reused from the heap instead of fresh mappings (counted as the process's
// minor page faults: each 4 KiB page of a fresh mapping faults on first
// touch).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

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

TEST(ConfigureCpu, SetsLibTorchThreads) {
  EXPECT_EQ(ConfigureCpu(2), 2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  EXPECT_GE(ConfigureCpu(0), 1);
}

TEST(ConfigureCpu, FreedLargeTensorsAreReusedWithoutPageFaults) {
  ConfigureCpu(1);
  for (int warm_up = 0; warm_up < 6; ++warm_up) OneStepOfLargeTensors();
  const int64_t before = MinorFaults();
  OneStepOfLargeTensors();
  const int64_t faults = MinorFaults() - before;
  // With glibc's defaults the heap's free top goes back to the kernel at
  // every step's end and 24,544 pages (96 MiB) fault in again each step.
  EXPECT_LT(faults, 1000) << "a step's tensors faulted " << faults << " pages in again";
}

}  // namespace
}  // namespace scdino::run
