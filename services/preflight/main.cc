// scdino-preflight: run as the first step of a job, on every task of it
// (deploy/slurm/train.sbatch), or on its own: the collective network, GPUs,
// the data set's read throughput and free space, judged against
// scdino.preflight.* (docs/distributed.md#preflight).
#include <unistd.h>

#include <iostream>
#include <string>

#include "common/env.h"
#include "common/files.h"
#include "common/prom_text.h"
#include "preflight/preflight.h"
#include "launch/environment.h"
#include "launch/launch.h"
#include "plan/source.h"
#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/service.h"
#include "process/signals.h"

namespace {

using namespace scdino;            // NOLINT: a main
using namespace scdino::process;   // NOLINT: the exit codes, CommandLine
using namespace scdino::preflight;  // NOLINT

int Fail(const Status& s) { return process::Fail(nullptr, "scdino-preflight", s); }

// The data set's read throughput from this node (one task a node reads, so
// that the figure is the node's): a packed set through the packed reader,
// from where the trainer will read it (this node's staged copy, when there
// is one), else the indexed files. A data set this node cannot index is a
// failed check of the node, judged with the others' (every rank still
// meets the rest).
void CheckDataRead(const run::RunConfig& config, bool has_config, int64_t files, RankChecks* mine) {
  if (config.scdino.data_source == "synthetic" ||
      (config.scdino.data_source == "folder" && config.meta.dataset_dir.empty())) {
    mine->notes.push_back("no data set files to read (" +
                          std::string(has_config ? "scdino.data_source " + config.scdino.data_source : "no --config") +
                          ")");
    return;
  }
  mine->reads = true;
  auto packed = data::OpenPackedSet(run::DataSourceOf(config));
  if (!packed.ok()) {
    mine->read.error = packed.status().message();
  } else if (*packed) {
    mine->read = ReadPackedThroughput(**packed, files);
    mine->notes.push_back("read the packed set from " + (*packed)->files_dir() +
                          ((*packed)->files_dir() == config.meta.dataset_dir ? " (the shared copy)"
                                                                             : " (this node's copy)"));
  } else if (auto data = run::IndexDataset(config); data.ok()) {
    std::vector<std::string> paths;
    for (const auto& e : data->entries) paths.push_back(e.path);
    mine->read = ReadThroughput(paths, files);
  } else {
    mine->read.error = data.status().message();
  }
}

// What this rank checks on its own: its device and GPU, the binding Slurm
// set (judged across the node's tasks on rank 0; without a GPU driver too:
// the test cluster's GPUs are stand-ins), free space, the data set's reads
// and the InfiniBand devices.
RankChecks CheckThisRank(const run::RunConfig& config, const run::LaunchInfo& launch, const run::DeviceChoice& device,
                         const std::string& nvidia_smi, bool has_config) {
  RankChecks mine;
  mine.rank = launch.rank;
  mine.local_rank = launch.local_rank;
  mine.tasks_on_node = launch.local_world_size;
  mine.node = ThisHostName();
  mine.device = device.device.str();
  mine.device_why = device.why;
  mine.run_dir = config.run_dir();
  mine.free_gb = FreeGigabytes(mine.run_dir);
  CheckGpu(device.device, nvidia_smi, &mine);
  auto binding = run::GpuBindingFromEnv([](const char* k) { return std::getenv(k); }, launch.local_rank);
  if (binding.ok()) {
    mine.gpu_job = binding->gpu_job;
    mine.gpu = binding->gpu;
  } else {
    mine.gpu_job = true;
    mine.binding_error = binding.status().message();
  }
  if (launch.local_rank == 0 && config.scdino.preflight.read_files > 0) {
    CheckDataRead(config, has_config, config.scdino.preflight.read_files, &mine);
  }
  mine.ib_devices = InfinibandDevices();
  return mine;
}

// Which network NCCL takes is in its own log (NCCL_DEBUG=INFO), into a file
// of this rank's, read after the sweep; a job that sets NCCL_DEBUG itself
// keeps its log where it wants it. The file's path, or empty.
std::string LogNcclNetwork(const run::RunConfig& config, const run::LaunchInfo& launch, const torch::Device& device) {
  if (launch.world_size <= 1 || !device.is_cuda() || std::getenv("NCCL_DEBUG") != nullptr) return "";
  const std::string dir = config.run_dir() + "/preflight-nccl";
  if (!MakeDirs(dir).ok()) return "";
  const std::string log = dir + "/rank" + std::to_string(launch.rank) + ".log";
  std::remove(log.c_str());
  ::setenv("NCCL_DEBUG", "INFO", 1);
  ::setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  ::setenv("NCCL_DEBUG_FILE", log.c_str(), 1);
  return log;
}

// Where rank 0 writes the report.
struct ReportFiles {
  std::string json, prom, textfile_dir;
};

// Rank 0: judges every rank's checks and the sweep, prints them, writes the
// report (JSON, Prometheus text, the dashboard's textfile copy); the number
// of failed checks.
StatusOr<int64_t> Verdict(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& all,
                          const run::PreflightConfig& t, int64_t world_size, const std::string& backend,
                          const ReportFiles& files) {
  const auto failures = Judge(sweep, all, t);
  const auto warnings = FabricWarnings(all);
  if (!sweep.empty()) std::cout << SweepTable(sweep, world_size, backend);
  for (const auto& r : all) {
    std::cout << "# rank " << r.rank << " on " << r.node << " (" << r.device
              << (r.device_why.empty() ? "" : ": " + r.device_why) << "): " << r.free_gb << " GB free in "
              << r.run_dir;
    if (r.reads) std::cout << "; read " << r.read.files << " data-set files at " << r.read.mbps() << " MB/s";
    if (!r.gpu.empty()) std::cout << "; bound to GPU " << r.gpu;
    if (!r.nccl_network.empty()) std::cout << "; NCCL network " << r.nccl_network;
    if (!r.ib_devices.empty()) std::cout << "; " << r.ib_devices.size() << " InfiniBand device(s)";
    if (r.gpu_free_gb >= 0) std::cout << "; GPU " << r.gpu_free_gb << " of " << r.gpu_total_gb << " GB free";
    for (const auto& n : r.notes) std::cout << "; " << n;
    std::cout << "\n";
  }
  const auto report = Report(sweep, all, failures, t, world_size, backend, warnings);
  const char* job = std::getenv("SLURM_JOB_ID");
  if (auto s = WriteFileAtomic(files.json, report.dump(2) + "\n"); !s.ok()) return s;
  const std::string prom = PrometheusText(sweep, all, failures, job ? job : "");
  if (auto s = WriteFileAtomic(files.prom, prom); !s.ok()) return s;
  // The dashboard's copy: a problem there must not stop a job whose checks passed.
  WriteTextfile(files.textfile_dir, "scdino-preflight.prom", prom, "scdino-preflight");
  std::cerr << "scdino-preflight: " << (failures.empty() ? "passed" : "FAILED") << " on " << world_size << " rank(s)";
  if (!sweep.empty()) {
    std::cerr << ": all-reduce busbw " << sweep.back().busbw_gbps << " GB/s at " << sweep.back().bytes
              << " B, latency " << sweep.front().seconds * 1e6 << " us at " << sweep.front().bytes << " B";
  }
  std::cerr << "; report " << files.json << "\n";
  for (const auto& f : failures) std::cerr << "scdino-preflight: FAILED: " << f << "\n";
  for (const auto& w : warnings) std::cerr << "scdino-preflight: warning: " << w << "\n";
  return static_cast<int64_t>(failures.size());
}

// The command line's own flags.
struct Flags {
  std::string json_path, prom_path, nvidia_smi = "nvidia-smi", textfile_dir = TextfileDir();
  bool has_config = false;
};

// Every check of this rank, the sweep across ranks, and rank 0's verdict
// (every rank ends with it).
int RunChecks(const run::RunConfig& config, const Service& s, const Flags& f) {
  const auto timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
  const auto& t = config.scdino.preflight;
  RankChecks mine = CheckThisRank(config, s.launch, s.device, f.nvidia_smi, f.has_config);
  std::vector<SweepRow> sweep;
  std::shared_ptr<training::Collective> collective;
  std::string backend = "none (one rank)";
  const std::string nccl_log = LogNcclNetwork(config, s.launch, s.device.device);
  if (s.launch.world_size > 1) {
    training::DistributedOptions dist;
    dist.timeout = timeout;
    dist.on_lost_peer = process::ExitForLostPeer;
    auto c = training::Collective::Connect(s.coordinator->store(), s.launch.rank, s.launch.world_size, dist,
                                           s.device.device);
    if (!c.ok()) return Fail(c.status());
    collective = *c;
    backend = collective->backend();
    auto rows = AllReduceSweep(*collective, SweepSizes(t.min_bytes, t.max_bytes, t.factor), t.iterations,
                               t.seconds_per_size, s.device.device, StopSignalReceived);
    if (!rows.ok()) return Fail(rows.status());
    sweep = *rows;
    if (!nccl_log.empty()) {
      auto text = ReadFile(nccl_log);
      mine.nccl_network = text.ok() ? NcclNetwork(*text) : "";
      if (mine.nccl_network.empty()) mine.notes.push_back("NCCL's network not found in " + nccl_log);
    }
  }
  auto all = GatherOnRankZero(*s.coordinator, mine);
  if (!all.ok()) return Fail(all.status());
  int64_t failed = 0;
  if (s.launch.rank == 0) {
    const ReportFiles files{f.json_path.empty() ? config.run_dir() + "/preflight.json" : f.json_path,
                            f.prom_path.empty() ? config.run_dir() + "/preflight.prom" : f.prom_path, f.textfile_dir};
    auto verdict = Verdict(sweep, *all, t, s.launch.world_size, backend, files);
    if (!verdict.ok()) return Fail(verdict.status());
    failed = *verdict;
  }
  // Every rank ends with rank 0's verdict.
  if (collective) {
    auto verdict = torch::tensor({static_cast<double>(failed)}, torch::kFloat64);
    collective->AllReduceSum(verdict);
    failed = static_cast<int64_t>(verdict.item<double>());
    collective->Shutdown();
  }
  // A signal during the checks (a preemption, the time limit) is the
  // job's: the batch script requeues on 75 as it does for the trainer.
  if (StopSignalReceived()) {
    std::cerr << "scdino-preflight: stopped by a signal\n";
    return kExitPreempted;
  }
  return failed == 0 ? kExitCompleted : kExitPreflightFailed;
}

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-preflight", "stopping after the current check");
  Flags f;
  CommandLine cl("scdino-preflight",
                 "Checks a job's nodes before it trains: an all-reduce sweep on the trainer's backend (bus bandwidth "
                 "as nccl-tests), each rank's GPU, the data set's read throughput from each node and the run "
                 "directory's free space, against scdino.preflight.* (docs/distributed.md#preflight). Run it on every "
                 "task of the job (srun). Without --config: the defaults, run directory runs/preflight.\n" +
                     ExitCodesHelp("scdino-preflight"),
                 /*config_required=*/false);
  cl.app().add_option("--json", f.json_path, "the report; default <run_dir>/preflight.json")->type_name("FILE");
  cl.app()
      .add_option("--prom", f.prom_path,
                  "the report as Prometheus text (node_exporter's textfile collector); default <run_dir>/preflight.prom")
      ->type_name("FILE");
  cl.app().add_option("--nvidia-smi", f.nvidia_smi, "the nvidia-smi to ask for ECC errors")->type_name("CMD");
  cl.app()
      .add_option("--textfile-dir", f.textfile_dir,
                  "also write scdino-preflight.prom there, for node_exporter's textfile collector; default "
                  "$SCDINO_TEXTFILE_DIR, else Debian's node_exporter directory where it is writable")
      ->type_name("DIR");
  if (auto code = cl.Parse(argc, argv)) return *code;
  std::vector<run::KeyValue> defaults;
  // Without --config: no data set to read (its check says so), and a run
  // directory of its own.
  if (cl.config_path().empty()) {
    defaults = {{"meta.name_of_run", "preflight"}, {"scdino.data_source", "synthetic"}};
  }
  const auto settings = cl.RunSettings(defaults);
  if (!settings) return kExitBadInput;
  const auto& config = *settings;
  f.has_config = !cl.config_path().empty();
  const ServiceSpec spec{"scdino-preflight", false, nullptr, std::nullopt};
  RunService(spec, config, cl.ConfigureCpu(), [&](Service& s) { return RunChecks(config, s, f); });
}
