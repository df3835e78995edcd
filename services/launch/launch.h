// Where this process sits in a distributed run: rank, world size, local rank
// and the rendezvous address, from Slurm's variables, torchrun-style
// variables, or a single process when neither is set.
// Functions of the environment they are given; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  /// The rendezvous ports of this attempt, in the order every rank tries
  /// them (master_port first): rank 0 serves on the first it can bind, the
  /// others find it by the run's secret (launch/coordinator.h). One port where
  /// it was given (MASTER_PORT, torchrun).
  std::vector<int64_t> port_candidates;
  std::string source = "single";  ///< slurm | torchrun | single
  /// What tells this attempt from every other of the same run: Slurm's job,
  /// step and restart count (a requeue is another attempt), torchrun's run
  /// id and restart count; with the rendezvous address. The rendezvous keys
  /// are under a prefix keyed by the run's secret and this text.
  std::string attempt;
  /// What the environment said that was not taken (a RANK beside Slurm's
  /// variables), for the program to print once.
  std::vector<std::string> notes;
};

/// Where Linux reads the range of local ports that outgoing connections take.
inline constexpr const char* kEphemeralPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range";

/// Reads the environment through `getenv` (injectable for tests):
/// torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
/// when RANK and WORLD_SIZE are set outside a Slurm step (or torchrun set
/// TORCHELASTIC_RUN_ID; inside a step, Slurm's win and a differing RANK,
/// WORLD_SIZE or LOCAL_RANK is named in `notes`); else Slurm's SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST (or
/// SLURM_JOB_NODELIST) and PortForJob of SLURM_JOB_ID and SLURM_STEP_ID
/// (MASTER_ADDR and MASTER_PORT override); else one process. In Slurm's
/// own containers (SLURM_CONTAINER, no SLURM_PROCID: srun --container gives
/// a task only the step's variables), the rank is this host's place in
/// SLURM_STEP_NODELIST, one task per node. Errors name the variable; a
/// slurm.conf whose SrunPortRange leaves no rendezvous port (and no
/// MASTER_PORT) is InvalidArgument naming the ranges.
StatusOr<LaunchInfo> LaunchFromEnv(const std::function<const char*(const char*)>& getenv);

/// A range of ports [first, last] that scdino never takes for a rendezvous.
using PortRange = std::pair<int64_t, int64_t>;

/// How many ports an attempt's rendezvous may try.
inline constexpr int kRendezvousPorts = 8;
/// The ports a Slurm job step's rendezvous takes from: [20000, 32000).
inline constexpr int64_t kRendezvousPortFirst = 20000;
inline constexpr int64_t kRendezvousPortCount = 12000;

/// The ports of a Slurm job step's rendezvous, in the order every rank tries
/// them: kRendezvousPorts distinct ports in [20000, 32000), a function of
/// the job, step and restart count alone, so every task computes the same
/// list on whatever node it runs (nodes tuned differently included). The
/// job's place is hashed, so two jobs share a first port by chance alone (1
/// in 12,000), never because their ids differ by a multiple of anything; the
/// steps of a job (a trainer and an evaluator side by side) and its
/// restarts never start on the same port, so a process holding one fails
/// one attempt, not every requeue. Ports in `reserved` are skipped. They lie
/// below Linux's default ephemeral range (32768-60999), from which outgoing
/// connections take their local ports; on a node whose range covers them,
/// EphemeralPortWarning names the port, the range and the fix (MASTER_PORT
/// overrides).
std::vector<int64_t> RendezvousPorts(int64_t job_id, int64_t step_id, int64_t restart,
                                     const std::vector<PortRange>& reserved);

/// The ports no rendezvous takes: torchrun's (29500, its c10d rendezvous's
/// 29400) and Slurm's own from `slurm_conf` (SlurmctldPort, SlurmdPort,
/// SrunPortRange; Slurm's defaults 6817 and 6818 when unset); a missing or
/// unreadable file gives Slurm's defaults.
std::vector<PortRange> ReservedPorts(const std::string& slurm_conf);

/// The first rendezvous port of a job step's attempt, with the ports of
/// this node's slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf) reserved.
int64_t PortForJob(int64_t job_id, int64_t step_id = 0, int64_t restart = 0);

/// "" when `port` is outside this node's ephemeral port range (read from
/// `range_file`), else a warning naming the port, the range and the fix.
std::string EphemeralPortWarning(int64_t port, const std::string& range_file = kEphemeralPortRangeFile);

/// Expands Slurm's tasks-per-node notation ("2(x3),1" -> 2, 2, 2, 1).
StatusOr<std::vector<int64_t>> ExpandTasksPerNode(const std::string& list);

/// Expands a Slurm host list ("gpu-st-[1-4,7],login1", "n[01-03]-ib") into
/// host names, keeping zero padding. InvalidArgument names the list.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

}  // namespace scdino::run
