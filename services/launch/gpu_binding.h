// Which GPU a task is bound to, as one function of the environment Slurm
// (or a launcher) sets: CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS,
// SLURM_JOB_GPUS, SLURM_GPUS*, and the task's local rank. The services pick
// their CUDA device with it and scdino-preflight checks every task's with
// it, on a GPU node and on the test cluster's stand-in GPUs alike (no CUDA
// call: what the environment says, not what a driver sees).
// Functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::run {

struct GpuBinding {
  /// The job or step was given GPUs (SLURM_STEP_GPUS, SLURM_JOB_GPUS,
  /// SLURM_GPUS, SLURM_GPUS_PER_TASK, SLURM_GPUS_PER_NODE or
  /// SLURM_GPUS_ON_NODE > 0): every task of it must have one.
  bool gpu_job = false;
  /// CUDA_VISIBLE_DEVICES as listed: physical GPU indices or UUIDs; empty
  /// when unset, empty, "NoDevFiles" or "void".
  std::vector<std::string> visible;
  /// The CUDA device index this task computes on among `visible` (0 when
  /// it sees exactly one, its local rank when the node's tasks share a
  /// list); -1: none.
  int64_t device = -1;
  /// The physical GPU that is ("" for none): what two tasks of one node
  /// must not share.
  std::string gpu;
  /// One phrase for logs and the preflight report, e.g. "GPU 2
  /// (CUDA_VISIBLE_DEVICES=2, the one this task was given)".
  std::string why;
};

/// The binding of the task with local rank `local_rank` (SLURM_LOCALID,
/// LOCAL_RANK). InvalidArgument, naming the variables and values: a GPU
/// job whose task was given no GPU (CUDA_VISIBLE_DEVICES unset or empty
/// while Slurm says the job has GPUs), and a list the node's tasks share
/// with fewer GPUs than the task's local rank needs.
StatusOr<GpuBinding> GpuBindingFromEnv(const std::function<const char*(const char*)>& getenv, int64_t local_rank);

/// One task's binding as the preflight gathers them.
struct TaskGpu {
  std::string node;
  int64_t rank = 0, local_rank = 0;
  bool gpu_job = false;
  std::string gpu;    ///< the physical GPU, "" for none
  std::string error;  ///< GpuBindingFromEnv's refusal, if any
};

/// Every problem of a job's bindings, as lines naming node, tasks and GPU:
/// a task of a GPU job without a GPU, and two tasks of one node bound to
/// the same GPU. Empty when every task of a GPU job has its own.
std::vector<std::string> CheckGpuBindings(const std::vector<TaskGpu>& tasks);

}  // namespace scdino::run
