// Where this process sits in a distributed run: rank, world size, local rank
// and the rendezvous address, from Slurm's variables, torchrun-style
// variables, or a single process when neither is set.
// Functions of the environment they are given; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::run {

struct LaunchInfo {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  /// Ranks on this node (torchrun's LOCAL_WORLD_SIZE, Slurm's tasks per
  /// node): a node must have a GPU for each of them.
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  std::string source = "single";  ///< slurm | torchrun | single
  /// What tells this attempt from every other of the same run: Slurm's job,
  /// step and restart count (a requeue is another attempt), torchrun's run
  /// id and restart count; with the rendezvous address. The rendezvous keys
  /// are under a prefix keyed by the run's secret and this text.
  std::string attempt;
};

/// Where Linux reads the range of local ports that outgoing connections take.
inline constexpr const char* kEphemeralPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range";

/// Reads the environment through `getenv` (injectable for tests):
/// torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
/// when RANK and WORLD_SIZE are set; else Slurm's SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST (or
/// SLURM_JOB_NODELIST) and PortForJob of SLURM_JOB_ID and SLURM_STEP_ID
/// (MASTER_ADDR and MASTER_PORT override); else one process. Errors name
/// the variable.
StatusOr<LaunchInfo> LaunchFromEnv(const std::function<const char*(const char*)>& getenv);

/// The port of a Slurm job step's rendezvous: in [20000, 32000), a function
/// of the job and step alone, so that every task of the step computes the
/// same one on whatever node it runs (nodes tuned differently included),
/// steps running side by side (a trainer and an evaluator following it in
/// one job) and jobs sharing a node rarely collide. It lies below Linux's
/// default ephemeral range (32768-60999), from which outgoing connections
/// take their local ports; on a node whose range covers it,
/// EphemeralPortWarning names the port, the range and the fix (MASTER_PORT
/// overrides).
int64_t PortForJob(int64_t job_id, int64_t step_id = 0);

/// "" when `port` is outside this node's ephemeral port range (read from
/// `range_file`), else a warning naming the port, the range and the fix.
std::string EphemeralPortWarning(int64_t port, const std::string& range_file = kEphemeralPortRangeFile);

/// Expands Slurm's tasks-per-node notation ("2(x3),1" -> 2, 2, 2, 1).
StatusOr<std::vector<int64_t>> ExpandTasksPerNode(const std::string& list);

/// Expands a Slurm host list ("gpu-st-[1-4,7],login1", "n[01-03]-ib") into
/// host names, keeping zero padding. InvalidArgument names the list.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

}  // namespace scdino::run
