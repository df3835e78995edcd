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
};

/// Where Linux reads the range of local ports that outgoing connections take.
inline constexpr const char* kEphemeralPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range";

/// A node's ephemeral port range (inclusive).
struct PortRange {
  int64_t low = 32768;   ///< Linux's default
  int64_t high = 60999;  ///< Linux's default
};

/// The range in `range_file` (two numbers, as the kernel writes them);
/// Linux's default where the file cannot be read or makes no sense.
PortRange EphemeralPortRange(const std::string& range_file = kEphemeralPortRangeFile);

/// Reads the environment through `getenv` (injectable for tests):
/// torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
/// when RANK and WORLD_SIZE are set; else Slurm's SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST (or
/// SLURM_JOB_NODELIST) and a port derived from SLURM_JOB_ID and
/// SLURM_STEP_ID outside the ephemeral range read from `port_range_file`
/// (MASTER_ADDR and MASTER_PORT override); else one process.
/// Errors name the variable.
StatusOr<LaunchInfo> LaunchFromEnv(const std::function<const char*(const char*)>& getenv,
                                   const std::string& port_range_file = kEphemeralPortRangeFile);

/// The port of a Slurm job step's rendezvous: every task of a step agrees
/// on it, steps running side by side (a trainer and an evaluator following
/// it in one job) or jobs sharing a node rarely collide, and it lies
/// outside the node's ephemeral range, from which outgoing connections take
/// their local ports (one of those could otherwise hold the port when rank
/// 0 binds it). With Linux's default range (32768-60999) it is in [20000,
/// 32000); below a range that starts lower, or above one that leaves no
/// room below it, in a window of up to 12000 ports. Only where the range
/// covers every port above 1023 does it fall inside (and
/// EphemeralPortWarning says so). Every node must have the same range, as
/// clusters configure them; MASTER_PORT overrides.
int64_t PortForJob(int64_t job_id, int64_t step_id = 0, PortRange ephemeral = {});

/// "" when `port` is outside this node's ephemeral port range (read from
/// `range_file`), else a warning naming the port, the range and the fix.
std::string EphemeralPortWarning(int64_t port, const std::string& range_file = kEphemeralPortRangeFile);

/// Expands Slurm's tasks-per-node notation ("2(x3),1" -> 2, 2, 2, 1).
StatusOr<std::vector<int64_t>> ExpandTasksPerNode(const std::string& list);

/// Expands a Slurm host list ("gpu-st-[1-4,7],login1", "n[01-03]-ib") into
/// host names, keeping zero padding. InvalidArgument names the list.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

}  // namespace scdino::run
