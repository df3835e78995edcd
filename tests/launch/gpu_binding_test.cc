// run::GpuBindingFromEnv and CheckGpuBindings: what each task is bound to
// as Slurm's variables say (the same values the test cluster's GRES gives:
// tests/deploy/cluster_test.sh), and the verdicts the preflight prints.
#include "launch/gpu_binding.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace scdino::run {
namespace {

using Vars = std::map<std::string, std::string>;

StatusOr<GpuBinding> Bind(const Vars& vars, int64_t local_rank) {
  return GpuBindingFromEnv(
      [&](const char* k) -> const char* {
        auto it = vars.find(k);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      local_rank);
}

// srun --gpus-per-task=1: Slurm 22.05 gives task i of a node
// CUDA_VISIBLE_DEVICES=i and SLURM_STEP_GPUS=i: device 0, physical GPU i.
TEST(GpuBinding, AGpuPerTaskIsDeviceZeroOfItsOwnList) {
  for (int64_t local = 0; local < 4; ++local) {
    const std::string id = std::to_string(local);
    auto b = Bind({{"CUDA_VISIBLE_DEVICES", id}, {"SLURM_STEP_GPUS", id}, {"SLURM_GPUS_PER_TASK", "1"}}, local);
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_TRUE(b->gpu_job);
    EXPECT_EQ(b->device, 0);
    EXPECT_EQ(b->gpu, id);
    EXPECT_EQ(b->why, "GPU " + id + " (CUDA_VISIBLE_DEVICES=" + id + ", the one this task was given)");
  }
}

// --gpus-per-node=2 with 2 tasks a node: both see "0,1"; local rank picks.
TEST(GpuBinding, TasksSharingTheNodesListTakeTheirLocalRanksEntry) {
  auto b = Bind({{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SLURM_STEP_GPUS", "0,1"}}, 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->device, 1);
  EXPECT_EQ(b->gpu, "1");
  // A third task on that node has no entry of its own.
  b = Bind({{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SLURM_STEP_GPUS", "0,1"}}, 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("local rank 2 but its node's tasks share 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1)"),
            std::string::npos)
      << b.status().message();
}

TEST(GpuBinding, AGpuJobsTaskWithoutAGpuIsRefusedNamingTheVariables) {
  for (const auto& [v, says] :
       {std::pair<Vars, std::string>{{{"SLURM_JOB_GPUS", "0,1"}}, "(CUDA_VISIBLE_DEVICES unset) although the job has "
                                                                  "GPUs (SLURM_JOB_GPUS=0,1)"},
        {{{"SLURM_GPUS", "1"}, {"CUDA_VISIBLE_DEVICES", ""}}, "(CUDA_VISIBLE_DEVICES empty) although the job has "
                                                              "GPUs (SLURM_GPUS=1)"},
        {{{"SLURM_GPUS_ON_NODE", "4"}, {"CUDA_VISIBLE_DEVICES", "NoDevFiles"}},
         "(CUDA_VISIBLE_DEVICES=NoDevFiles) although the job has GPUs (SLURM_GPUS_ON_NODE=4)"}}) {
    auto b = Bind(v, 0);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("this task (local rank 0) was given no GPU " + says), std::string::npos)
        << b.status().message();
  }
}

TEST(GpuBinding, ACpuJobHasNone) {
  for (const Vars& v : {Vars{}, Vars{{"SLURM_GPUS_ON_NODE", "0"}}, Vars{{"CUDA_VISIBLE_DEVICES", "void"}}}) {
    auto b = Bind(v, 3);
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_FALSE(b->gpu_job);
    EXPECT_EQ(b->device, -1);
    EXPECT_EQ(b->gpu, "");
  }
}

// UUIDs (what some sites' CUDA_VISIBLE_DEVICES hold) are ids like any other.
TEST(GpuBinding, UuidsAreIdsToo) {
  auto b = Bind({{"CUDA_VISIBLE_DEVICES", "GPU-8a2f,GPU-77c1"}, {"SLURM_JOB_GPUS", "0,1"}}, 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->gpu, "GPU-77c1");
}

}  // namespace
}  // namespace scdino::run
