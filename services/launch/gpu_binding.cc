#include "launch/gpu_binding.h"

#include <cstdlib>
#include <map>
#include <sstream>

namespace scdino::run {
namespace {

std::string Env(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

StatusOr<GpuBinding> GpuBindingFromEnv(const std::function<const char*(const char*)>& getenv, int64_t local_rank) {
  GpuBinding b;
  const std::string step = Env(getenv, "SLURM_STEP_GPUS"), job = Env(getenv, "SLURM_JOB_GPUS");
  std::string given;  // the first variable that says the job has GPUs, for messages
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS", "SLURM_GPUS_PER_TASK",
                           "SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"}) {
    const std::string v = Env(getenv, name);
    if (v.empty() || v == "0") continue;
    b.gpu_job = true;
    given = std::string(name) + "=" + v;
    break;
  }
  const std::string cvd = Env(getenv, "CUDA_VISIBLE_DEVICES");
  if (cvd != "NoDevFiles" && cvd != "void") b.visible = SplitList(cvd);
  if (b.visible.empty()) {
    if (b.gpu_job) {
      const std::string seen = getenv("CUDA_VISIBLE_DEVICES") == nullptr ? "CUDA_VISIBLE_DEVICES unset"
                               : cvd.empty()                              ? "CUDA_VISIBLE_DEVICES empty"
                                                                          : "CUDA_VISIBLE_DEVICES=" + cvd;
      return Status::InvalidArgument("this task (local rank " + std::to_string(local_rank) + ") was given no GPU (" +
                                     seen + ") although the job has GPUs (" + given +
                                     "): ask for one per task (srun --gpus-per-task=1, or --gpus-per-node equal to "
                                     "--ntasks-per-node)");
    }
    b.why = "no GPU (a CPU job)";
    return b;
  }
  if (b.visible.size() == 1) {
    b.device = 0;
    b.gpu = b.visible[0];
    b.why = "GPU " + b.gpu + " (CUDA_VISIBLE_DEVICES=" + cvd + ", the one this task was given)";
    return b;
  }
  // The node's tasks share one list (--gpus-per-node without a per-task
  // binding, torchrun): local rank i takes the i-th.
  if (local_rank < 0 || local_rank >= static_cast<int64_t>(b.visible.size())) {
    return Status::InvalidArgument("this task has local rank " + std::to_string(local_rank) + " but its node's " +
                                   "tasks share " + std::to_string(b.visible.size()) + " GPU(s) (CUDA_VISIBLE_DEVICES=" +
                                   cvd + "): launch at most " + std::to_string(b.visible.size()) +
                                   " tasks per node, one GPU each (srun --gpus-per-task=1)");
  }
  b.device = local_rank;
  b.gpu = b.visible[static_cast<size_t>(local_rank)];
  b.why = "GPU " + b.gpu + " (entry " + std::to_string(local_rank) + " of CUDA_VISIBLE_DEVICES=" + cvd +
          ", by local rank)";
  return b;
}

std::vector<std::string> CheckGpuBindings(const std::vector<TaskGpu>& tasks) {
  std::vector<std::string> problems;
  std::map<std::pair<std::string, std::string>, const TaskGpu*> holder;  // (node, gpu) -> first task
  for (const auto& t : tasks) {
    const std::string who = t.node + ": task " + std::to_string(t.local_rank) + " (rank " + std::to_string(t.rank) + ")";
    if (!t.error.empty()) {
      problems.push_back(who + ": " + t.error);
      continue;
    }
    if (t.gpu.empty()) {
      if (t.gpu_job) problems.push_back(who + ": no GPU, in a job with GPUs");
      continue;
    }
    auto [it, first] = holder.emplace(std::make_pair(t.node, t.gpu), &t);
    if (!first) {
      const TaskGpu& other = *it->second;
      problems.push_back(t.node + ": tasks " + std::to_string(other.local_rank) + " and " +
                         std::to_string(t.local_rank) + " (ranks " + std::to_string(other.rank) + " and " +
                         std::to_string(t.rank) + ") are both bound to GPU " + t.gpu +
                         ": each task needs its own (srun --gpus-per-task=1)");
    }
  }
  return problems;
}

}  // namespace scdino::run
