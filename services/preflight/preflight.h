// What a job checks before it trains, on every task: the collective
// network (an all-reduce sweep over message sizes on the trainer's backend,
// reported as nccl-tests reports it), each rank's GPU, the data set's read
// throughput from each node and the run directory's free space; each figure
// judged against scdino.preflight.* so that a job on a bad node or network
// stops before it spends every other node's hours.
// Functions of their arguments, except where a comment says a function
// talks to the ranks (then every rank calls it, in the same order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "data/packed.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "launch/gpu_binding.h"
#include "training/distributed.h"

namespace scdino::preflight {

/// One message size of the all-reduce sweep. Bandwidths in GB/s (1e9 bytes).
struct SweepRow {
  int64_t bytes = 0;
  int64_t iterations = 0;  ///< timed all-reduces (after one warm-up)
  double seconds = 0.0;    ///< mean time of one all-reduce
  double algbw_gbps = 0.0;
  double busbw_gbps = 0.0;
};

/// nccl-tests' bus bandwidth of an all-reduce over `ranks`: the algorithm
/// bandwidth (bytes / time) x 2 (ranks - 1) / ranks, the share of a ring's
/// links each byte crosses, so that it compares with the hardware's link
/// bandwidth whatever the rank count. 0 for one rank (nothing crosses).
double BusBandwidth(double algbw, int64_t ranks);

/// min_bytes, min_bytes x factor, ... up to max_bytes (which always ends
/// the list), each a multiple of 4 bytes (float32 elements).
std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes, int64_t factor);

/// Talks to the ranks: a float32 sum all-reduce of each size on
/// `collective`'s backend (NCCL on GPUs, Gloo on CPUs): one warm-up, then
/// up to `iterations` timed ones or until `seconds_per_size` has passed
/// (every rank stops after the count rank 0 decides). `should_stop` is
/// asked between sizes: true ends with Aborted.
StatusOr<std::vector<SweepRow>> AllReduceSweep(training::Collective& collective, const std::vector<int64_t>& sizes,
                                               int64_t iterations, double seconds_per_size, torch::Device device,
                                               const std::function<bool()>& should_stop = {});

/// The sweep as nccl-tests prints it: size, count, type, time, algbw,
/// busbw, one row per size.
std::string SweepTable(const std::vector<SweepRow>& rows, int64_t ranks, const std::string& backend);

/// Whole-file reads of a sample of `paths`.
struct ReadSample {
  int64_t files = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
  double mbps() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0; }
  std::string error;  ///< the first file that could not be read, and why
};

/// Reads `files` of `paths` (evenly spread over the list, in 1 MiB blocks).
ReadSample ReadThroughput(const std::vector<std::string>& paths, int64_t files);

/// Reads `images` images of a packed set (evenly spread over it) through
/// the packed reader, from where the trainer will read them (the node's
/// staged copy when there is one: set.files_dir()), each checked against
/// its CRC.
ReadSample ReadPackedThroughput(const data::PackedSet& set, int64_t images);

/// What one rank finds on its node and GPU.
struct RankChecks {
  int64_t rank = 0;
  int64_t local_rank = 0;
  std::string node;
  std::string device;            ///< "cpu" or "cuda:N"
  std::string device_why;        ///< why (run::PickDevice): the key, the binding
  double free_gb = 0.0;          ///< run directory
  std::string run_dir;
  bool reads = false;            ///< this rank read the node's sample (local rank 0)
  ReadSample read;
  int64_t gpus_visible = 0;      ///< CUDA devices this task sees
  int64_t tasks_on_node = 1;
  /// What the environment binds this task to (launch/gpu_binding.h): whether
  /// the job has GPUs, the physical GPU ("" none), or why the binding is
  /// wrong. Judged across the tasks of each node, with or without CUDA.
  bool gpu_job = false;
  std::string gpu;
  std::string binding_error;
  double gpu_free_gb = -1.0;     ///< -1: no GPU
  double gpu_total_gb = -1.0;
  int64_t ecc_errors = -1;       ///< uncorrected, volatile (nvidia-smi); -1: not known
  /// The network NCCL chose for this rank ("IB", "Socket", "AWS Libfabric",
  /// ...: its "Using network" line, NcclNetwork); "" without NCCL or its log.
  std::string nccl_network;
  /// The node's InfiniBand devices (/sys/class/infiniband: mlx5_0, ...).
  std::vector<std::string> ib_devices;
  std::vector<std::string> notes;
};

/// The network NCCL's log says it uses (the last "NCCL INFO Using network
/// NAME" line of NCCL_DEBUG=INFO), "" when it says none.
std::string NcclNetwork(const std::string& nccl_log);

/// The InfiniBand devices under `dir` (the kernel's /sys/class/infiniband),
/// sorted; none when it does not exist.
std::vector<std::string> InfinibandDevices(const std::string& dir = "/sys/class/infiniband");

/// Warnings, one per node, naming it: NCCL runs over TCP sockets on a node
/// that has InfiniBand devices (NCCL falls back without an error when its
/// IB transport does not load: no rdma-core in the image, no
/// /dev/infiniband in the container, NCCL_IB_DISABLE), which costs most of
/// the all-reduce's bandwidth.
std::vector<std::string> FabricWarnings(const std::vector<RankChecks>& ranks);

/// Free space (GB) of the file system holding `dir` (or its nearest
/// existing parent); -1 when it cannot be asked.
double FreeGigabytes(const std::string& dir);

/// Uncorrected volatile ECC errors of the GPU with PCI bus id or index
/// `gpu` from `nvidia_smi` (a command on PATH or a path); -1 when it cannot
/// be run or does not say (a GPU without ECC).
int64_t EccErrors(const std::string& nvidia_smi, int64_t gpu);

/// The GPU of `device` as `c` records it (devices visible, free and total
/// memory, ECC errors through `nvidia_smi`); a CPU device leaves `c` as it is.
void CheckGpu(torch::Device device, const std::string& nvidia_smi, RankChecks* c);

nlohmann::json ToJson(const RankChecks& c);
RankChecks RankChecksFromJson(const nlohmann::json& j);

/// Every figure below (latency: above) its threshold, as a line naming the
/// check, the node (and rank), the figure and the key to change, and every
/// wrong GPU binding (run::CheckGpuBindings: a task of a GPU job without a
/// GPU, two tasks of a node on one GPU); empty when the job may train.
std::vector<std::string> Judge(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                               const run::PreflightConfig& t);

/// The whole report: configuration, sweep, every rank's checks, failures
/// and warnings (FabricWarnings).
nlohmann::json Report(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                      const std::vector<std::string>& failures, const run::PreflightConfig& t, int64_t world_size,
                      const std::string& backend, const std::vector<std::string>& warnings = {});

/// Prometheus text exposition of the report (scdino_preflight_* gauges,
/// labelled with the Slurm job `job`), for node_exporter's textfile
/// collector and the cluster dashboard.
std::string PrometheusText(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                           const std::vector<std::string>& failures, const std::string& job);

/// Talks to the ranks: every rank's checks on rank 0 (in rank order); the
/// other ranks get their own back. Over the coordinator's store.
StatusOr<std::vector<RankChecks>> GatherOnRankZero(run::Coordinator& coordinator, const RankChecks& mine);

}  // namespace scdino::preflight
