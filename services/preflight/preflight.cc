#include "preflight/preflight.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <torch/cuda.h>

#ifdef SCDINO_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "common/prom_text.h"

namespace scdino::preflight {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void Sync(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

double BusBandwidth(double algbw, int64_t ranks) {
  return ranks > 1 ? algbw * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks) : 0.0;
}

std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  auto round4 = [](int64_t b) { return std::max<int64_t>(4, b / 4 * 4); };
  std::vector<int64_t> sizes;
  const int64_t f = std::max<int64_t>(2, factor);
  for (int64_t b = round4(min_bytes); b < max_bytes; b = b > max_bytes / f ? max_bytes : b * f) sizes.push_back(b);
  if (sizes.empty() || sizes.back() != round4(max_bytes)) sizes.push_back(round4(max_bytes));
  return sizes;
}

StatusOr<std::vector<SweepRow>> AllReduceSweep(training::Collective& collective, const std::vector<int64_t>& sizes,
                                               int64_t iterations, double seconds_per_size, torch::Device device,
                                               const std::function<bool()>& should_stop) {
  std::vector<SweepRow> rows;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // The group's first collective sets up its connections (NCCL's
  // communicators): not part of any size's time.
  auto first = torch::zeros({1}, f32);
  collective.AllReduceSum(first);
  Sync(device);
  const int64_t least = std::min<int64_t>(5, iterations);
  for (int64_t bytes : sizes) {
    if (should_stop && should_stop()) {
      return Status::Aborted("stopped during the all-reduce sweep (" + std::to_string(rows.size()) + " of " +
                             std::to_string(sizes.size()) + " sizes measured)");
    }
    // Zeros: their sums stay zeros, however many times they are reduced.
    auto t = torch::zeros({bytes / 4}, f32);
    auto t0 = Clock::now();
    collective.AllReduceSum(t);  // warm-up (and the connection, the first time)
    Sync(device);
    const double warm = Since(t0);
    // Rank 0 decides how many timed ones fit; every rank runs that many.
    auto count = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64));
    if (collective.rank() == 0) {
      count.fill_(static_cast<double>(
          std::clamp<int64_t>(static_cast<int64_t>(seconds_per_size / std::max(warm, 1e-9)), least, iterations)));
    }
    collective.AllReduceSum(count);
    SweepRow row;
    row.bytes = bytes;
    row.iterations = static_cast<int64_t>(count.item<double>());
    t0 = Clock::now();
    for (int64_t i = 0; i < row.iterations; ++i) collective.AllReduceSum(t);
    Sync(device);
    row.seconds = Since(t0) / static_cast<double>(row.iterations);
    row.algbw_gbps = static_cast<double>(bytes) / row.seconds / 1e9;
    row.busbw_gbps = BusBandwidth(row.algbw_gbps, collective.world_size());
    rows.push_back(row);
  }
  return rows;
}

std::string SweepTable(const std::vector<SweepRow>& rows, int64_t ranks, const std::string& backend) {
  std::ostringstream o;
  o << "# all-reduce (sum, float) over " << ranks << " ranks, " << backend << "\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, "# %12s %12s %6s %6s %10s %9s %9s\n", "size", "count", "type", "iters", "time",
                "algbw", "busbw");
  o << buf;
  std::snprintf(buf, sizeof buf, "# %12s %12s %6s %6s %10s %9s %9s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                "(GB/s)");
  o << buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "  %12lld %12lld %6s %6lld %10.1f %9.3f %9.3f\n", static_cast<long long>(r.bytes),
                  static_cast<long long>(r.bytes / 4), "float", static_cast<long long>(r.iterations), r.seconds * 1e6,
                  r.algbw_gbps, r.busbw_gbps);
    o << buf;
  }
  return o.str();
}

ReadSample ReadThroughput(const std::vector<std::string>& paths, int64_t files) {
  ReadSample r;
  const int64_t n = std::min<int64_t>(files, static_cast<int64_t>(paths.size()));
  if (n <= 0) return r;
  std::vector<char> block(1 << 20);
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    // Spread over the list, so that one folder's cache does not decide it.
    const std::string& path = paths[static_cast<size_t>(i * static_cast<int64_t>(paths.size()) / n)];
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      r.error = path + ": cannot be read";
      break;
    }
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) r.bytes += in.gcount();
    ++r.files;
  }
  r.seconds = Since(t0);
  return r;
}

ReadSample ReadPackedThroughput(const data::PackedSet& set, int64_t images) {
  ReadSample r;
  const auto& entries = set.entries();
  const int64_t total = static_cast<int64_t>(entries.size());
  const int64_t n = std::min(images, total);
  if (n <= 0) return r;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = i * total / n;
    auto img = set.Read(index);
    if (!img.ok()) {
      r.error = img.status().message();
      break;
    }
    r.bytes += entries[static_cast<size_t>(index)].bytes;
    ++r.files;
  }
  r.seconds = Since(t0);
  return r;
}

double FreeGigabytes(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir.empty() ? "." : dir);
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  struct statvfs s {};
  if (::statvfs(p.c_str(), &s) != 0) return -1.0;
  return static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize) / 1e9;
}

int64_t EccErrors(const std::string& nvidia_smi, int64_t gpu) {
  // Spawned, not popen'ed: the child starts with the stop signals unblocked
  // (the service's threads block them, and a child inherits the mask;
  // process/signals.h), so a hung nvidia-smi still ends on the step's
  // SIGTERM. Their handlers are reset by the exec itself.
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t files;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  const std::string query = "--query-gpu=ecc.errors.uncorrected.volatile.total", index = std::to_string(gpu);
  std::vector<char*> argv{const_cast<char*>(nvidia_smi.c_str()), const_cast<char*>(query.c_str()),
                          const_cast<char*>("--format=csv,noheader,nounits"), const_cast<char*>("-i"),
                          const_cast<char*>(index.c_str()), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, nvidia_smi.c_str(), &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    return -1;
  }
  std::string line;
  char buf[128];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n > 0) line.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR) break;
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || line.empty()) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(line.c_str(), &end, 10);
  return end == line.c_str() ? -1 : static_cast<int64_t>(v);  // "[N/A]": no ECC on this GPU
}

void CheckGpu(torch::Device device, const std::string& nvidia_smi, RankChecks* c) {
  c->gpus_visible = static_cast<int64_t>(torch::cuda::device_count());
  if (!device.is_cuda()) return;
#ifdef SCDINO_WITH_CUDA
  c10::cuda::CUDAGuard guard(device.index());
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    c->gpu_free_gb = static_cast<double>(free) / 1e9;
    c->gpu_total_gb = static_cast<double>(total) / 1e9;
  } else {
    c->notes.push_back(device.str() + ": cudaMemGetInfo failed");
  }
  // nvidia-smi numbers the GPUs the node has; CUDA_VISIBLE_DEVICES maps ours.
  int64_t physical = device.index();
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::vector<std::string> ids;
    std::stringstream list(v);
    for (std::string id; std::getline(list, id, ',');) ids.push_back(id);
    if (physical < static_cast<int64_t>(ids.size())) {
      char* end = nullptr;
      const long long n = std::strtoll(ids[static_cast<size_t>(physical)].c_str(), &end, 10);
      physical = *end == '\0' ? n : -1;  // a UUID: asked by index no more
    }
  }
  if (physical >= 0) c->ecc_errors = EccErrors(nvidia_smi, physical);
  if (c->ecc_errors < 0) c->notes.push_back("ECC errors not known (no nvidia-smi, or no ECC on this GPU)");
#else
  (void)nvidia_smi;
#endif
}

nlohmann::json ToJson(const RankChecks& c) {
  nlohmann::json j{{"rank", c.rank},
                   {"local_rank", c.local_rank},
                   {"node", c.node},
                   {"device", c.device},
                   {"device_why", c.device_why},
                   {"run_dir", c.run_dir},
                   {"free_gb", c.free_gb},
                   {"gpus_visible", c.gpus_visible},
                   {"tasks_on_node", c.tasks_on_node},
                   {"gpu_job", c.gpu_job},
                   {"gpu", c.gpu},
                   {"binding_error", c.binding_error},
                   {"gpu_free_gb", c.gpu_free_gb},
                   {"gpu_total_gb", c.gpu_total_gb},
                   {"ecc_errors", c.ecc_errors},
                   {"nccl_network", c.nccl_network},
                   {"ib_devices", c.ib_devices},
                   {"notes", c.notes}};
  if (c.reads) {
    j["read"] = {{"files", c.read.files},
                 {"bytes", c.read.bytes},
                 {"seconds", c.read.seconds},
                 {"mbps", c.read.mbps()},
                 {"error", c.read.error}};
  }
  return j;
}

RankChecks RankChecksFromJson(const nlohmann::json& j) {
  RankChecks c;
  c.rank = j.value("rank", int64_t{0});
  c.local_rank = j.value("local_rank", int64_t{0});
  c.node = j.value("node", "");
  c.device = j.value("device", "");
  c.run_dir = j.value("run_dir", "");
  c.free_gb = j.value("free_gb", -1.0);
  c.gpus_visible = j.value("gpus_visible", int64_t{0});
  c.tasks_on_node = j.value("tasks_on_node", int64_t{1});
  c.gpu_job = j.value("gpu_job", false);
  c.gpu = j.value("gpu", "");
  c.binding_error = j.value("binding_error", "");
  c.gpu_free_gb = j.value("gpu_free_gb", -1.0);
  c.gpu_total_gb = j.value("gpu_total_gb", -1.0);
  c.ecc_errors = j.value("ecc_errors", int64_t{-1});
  c.device_why = j.value("device_why", std::string());
  c.nccl_network = j.value("nccl_network", std::string());
  c.ib_devices = j.value("ib_devices", std::vector<std::string>{});
  c.notes = j.value("notes", std::vector<std::string>{});
  if (j.contains("read")) {
    c.reads = true;
    c.read.files = j["read"].value("files", int64_t{0});
    c.read.bytes = j["read"].value("bytes", int64_t{0});
    c.read.seconds = j["read"].value("seconds", 0.0);
    c.read.error = j["read"].value("error", "");
  }
  return c;
}

std::vector<std::string> Judge(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                               const run::PreflightConfig& t) {
  std::vector<std::string> failed;
  if (!sweep.empty()) {
    const SweepRow& big = sweep.back();
    if (t.min_busbw_gbps > 0 && big.busbw_gbps < t.min_busbw_gbps) {
      // The figure is the job's (its slowest link): every node is named.
      std::vector<std::string> nodes;
      for (const auto& r : ranks) {
        if (std::find(nodes.begin(), nodes.end(), r.node) == nodes.end()) nodes.push_back(r.node);
      }
      std::string over;
      for (size_t i = 0; i < nodes.size(); ++i) over += (i ? ", " : " over ") + nodes[i];
      failed.push_back("all-reduce" + over + ": bus bandwidth " + Fixed(big.busbw_gbps, 3) + " GB/s at " +
                       std::to_string(big.bytes) + " B is below scdino.preflight.min_busbw_gbps " +
                       Fixed(t.min_busbw_gbps, 3) + " (the slowest link of the job: see the table)");
    }
    const SweepRow& small = sweep.front();
    if (t.max_latency_us > 0 && small.seconds * 1e6 > t.max_latency_us) {
      failed.push_back("all-reduce: " + std::to_string(small.bytes) + " B take " + Fixed(small.seconds * 1e6, 1) +
                       " us, above scdino.preflight.max_latency_us " + Fixed(t.max_latency_us, 1));
    }
  }
  for (const auto& r : ranks) {
    const std::string where = r.node + " (rank " + std::to_string(r.rank) + ")";
    if (t.min_free_gb > 0 && r.free_gb >= 0 && r.free_gb < t.min_free_gb) {
      failed.push_back(where + ": " + Fixed(r.free_gb, 2) + " GB free in " + r.run_dir +
                       ", below scdino.preflight.min_free_gb " + Fixed(t.min_free_gb, 2));
    }
    if (r.reads && !r.read.error.empty()) failed.push_back(where + ": data set: " + r.read.error);
    if (r.reads && t.min_read_mbps > 0 && r.read.files > 0 && r.read.mbps() < t.min_read_mbps) {
      failed.push_back(where + ": reads the data set at " + Fixed(r.read.mbps(), 1) + " MB/s (" +
                       std::to_string(r.read.files) + " files), below scdino.preflight.min_read_mbps " +
                       Fixed(t.min_read_mbps, 1));
    }
    if (r.device.rfind("cuda", 0) == 0) {
      if (t.min_gpu_free_gb > 0 && r.gpu_free_gb >= 0 && r.gpu_free_gb < t.min_gpu_free_gb) {
        failed.push_back(where + ": " + Fixed(r.gpu_free_gb, 2) + " GB free on " + r.device +
                         ", below scdino.preflight.min_gpu_free_gb " + Fixed(t.min_gpu_free_gb, 2) +
                         " (another process holds it?)");
      }
      if (r.ecc_errors > 0) {
        failed.push_back(where + ": " + r.device + " reports " + std::to_string(r.ecc_errors) +
                         " uncorrected ECC error(s) (nvidia-smi): drain the node");
      }
    }
  }
  std::vector<run::TaskGpu> bindings;
  for (const auto& r : ranks) bindings.push_back({r.node, r.rank, r.local_rank, r.gpu_job, r.gpu, r.binding_error});
  for (auto& p : run::CheckGpuBindings(bindings)) failed.push_back("GPU binding: " + p);
  return failed;
}

std::string NcclNetwork(const std::string& nccl_log) {
  static const std::regex kUsing(R"(NCCL INFO Using network (\S.*\S|\S)\s*$)");
  std::string network;
  std::istringstream in(nccl_log);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kUsing)) network = m[1];
  }
  return network;
}

std::vector<std::string> InfinibandDevices(const std::string& dir) {
  std::vector<std::string> devices;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) devices.push_back(e.path().filename().string());
  std::sort(devices.begin(), devices.end());
  return devices;
}

std::vector<std::string> FabricWarnings(const std::vector<RankChecks>& ranks) {
  std::vector<std::string> warnings;
  std::set<std::string> said;
  for (const auto& r : ranks) {
    if (r.nccl_network != "Socket" || r.ib_devices.empty() || !said.insert(r.node).second) continue;
    std::string devices;
    for (const auto& d : r.ib_devices) devices += (devices.empty() ? "" : ", ") + d;
    warnings.push_back("node " + r.node + " has InfiniBand device(s) " + devices + " but NCCL uses TCP sockets (rank " +
                       std::to_string(r.rank) + ": \"Using network Socket\"): its IB transport did not load; "
                       "the image needs rdma-core's libibverbs (the GPU image has it), the container "
                       "/dev/infiniband (Enroot's Mellanox hook mounts it where MELLANOX_VISIBLE_DEVICES is set, "
                       "as in the GPU image), and NCCL_IB_DISABLE must be unset (docs/distributed.md#the-fabric)");
  }
  return warnings;
}

nlohmann::json Report(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                      const std::vector<std::string>& failures, const run::PreflightConfig& t, int64_t world_size,
                      const std::string& backend, const std::vector<std::string>& warnings) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : sweep) {
    rows.push_back({{"bytes", r.bytes},
                    {"iterations", r.iterations},
                    {"time_us", r.seconds * 1e6},
                    {"algbw_gbps", r.algbw_gbps},
                    {"busbw_gbps", r.busbw_gbps}});
  }
  nlohmann::json per_rank = nlohmann::json::array();
  for (const auto& r : ranks) per_rank.push_back(ToJson(r));
  return {{"passed", failures.empty()},
          {"failures", failures},
          {"warnings", warnings},
          {"world_size", world_size},
          {"backend", backend},
          {"all_reduce", rows},
          {"ranks", per_rank},
          {"thresholds",
           {{"min_busbw_gbps", t.min_busbw_gbps},
            {"max_latency_us", t.max_latency_us},
            {"min_read_mbps", t.min_read_mbps},
            {"min_free_gb", t.min_free_gb},
            {"min_gpu_free_gb", t.min_gpu_free_gb}}}};
}

std::string PrometheusText(const std::vector<SweepRow>& sweep, const std::vector<RankChecks>& ranks,
                           const std::vector<std::string>& failures, const std::string& job) {
  PromText o;
  constexpr const char* kPassed = "scdino_preflight_passed";
  constexpr const char* kBusbw = "scdino_preflight_allreduce_busbw_bytes_per_second";
  constexpr const char* kSeconds = "scdino_preflight_allreduce_seconds";
  constexpr const char* kRead = "scdino_preflight_read_bytes_per_second";
  constexpr const char* kFree = "scdino_preflight_free_bytes";
  o.Gauge(kPassed, "1 when every preflight check of the job passed.");
  o.Sample(kPassed, {{"slurm_job_id", job}}, failures.empty() ? 1 : 0);
  o.Gauge(kBusbw, "All-reduce bus bandwidth (nccl-tests' busbw) by message size.");
  for (const auto& r : sweep) {
    o.Sample(kBusbw, {{"slurm_job_id", job}, {"size_bytes", std::to_string(r.bytes)}}, r.busbw_gbps * 1e9);
  }
  o.Gauge(kSeconds, "Time of one all-reduce by message size.");
  for (const auto& r : sweep) o.Sample(kSeconds, {{"slurm_job_id", job}, {"size_bytes", std::to_string(r.bytes)}}, r.seconds);
  o.Gauge(kRead, "Data-set read throughput of a node.");
  for (const auto& r : ranks) {
    if (r.reads) o.Sample(kRead, {{"slurm_job_id", job}, {"node", r.node}}, r.read.mbps() * 1e6);
  }
  o.Gauge(kFree, "Free space of the run directory seen from a node.");
  for (const auto& r : ranks) {
    if (r.local_rank == 0) o.Sample(kFree, {{"slurm_job_id", job}, {"node", r.node}}, r.free_gb * 1e9);
  }
  return o.str();
}

StatusOr<std::vector<RankChecks>> GatherOnRankZero(run::Coordinator& coordinator, const RankChecks& mine) {
  const auto& store = coordinator.store();
  if (!store || coordinator.world_size() <= 1) return std::vector<RankChecks>{mine};
  auto key = [](int64_t r) { return "preflight/rank" + std::to_string(r); };
  try {
    const std::string text = ToJson(mine).dump();
    store->set(key(mine.rank), std::vector<uint8_t>(text.begin(), text.end()));
    if (!coordinator.is_rank_zero()) return std::vector<RankChecks>{mine};
    std::vector<RankChecks> all;
    for (int64_t r = 0; r < coordinator.world_size(); ++r) {
      store->wait({key(r)}, coordinator.timeout());
      const auto bytes = store->get(key(r));
      all.push_back(RankChecksFromJson(nlohmann::json::parse(std::string(bytes.begin(), bytes.end()))));
    }
    return all;
  } catch (const std::exception& e) {
    return Status::Unavailable("preflight: gathering the ranks' checks failed: " + std::string(e.what()));
  }
}

}  // namespace scdino::preflight
