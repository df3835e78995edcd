#include "launch/launch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <tuple>

#include "common/env.h"

namespace scdino::run {
namespace {

StatusOr<int64_t> Int(const char* name, const char* value, int64_t min) {
  char* end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v < min) {
    return Status::InvalidArgument(std::string("environment variable ") + name + ": expected an integer >= " +
                                   std::to_string(min) + ", got '" + value + "'");
  }
  return static_cast<int64_t>(v);
}

// Splits at commas that are not inside brackets.
std::vector<std::string> SplitTop(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string SlurmConfPath() {
  const char* conf = std::getenv("SLURM_CONF");
  return conf != nullptr && *conf != '\0' ? conf : "/etc/slurm/slurm.conf";
}

}  // namespace

std::vector<int64_t> RendezvousPorts(int64_t job_id, int64_t step_id, int64_t restart,
                                     const std::vector<PortRange>& reserved) {
  // The job's place in the range is hashed (jobs collide by chance only);
  // a step moves it by 7919 and a restart by 3001, both prime to 12,000, so
  // the steps of a job, and its restarts, never start on the same port; the
  // next ports of a sequence are 4,813 apart (also prime to 12,000).
  static_assert(kRendezvousPortCount == 12000, "the steps below are prime to the range's size");
  const int64_t base = static_cast<int64_t>(SplitMix64(static_cast<uint64_t>(job_id)) % 12000) +
                       7919 * (step_id % 12000) + 3001 * (restart % 12000);
  std::vector<int64_t> ports;
  for (int64_t k = 0; ports.size() < static_cast<size_t>(kRendezvousPorts) && k < 12000; ++k) {
    const int64_t p = kRendezvousPortFirst + (base + 4813 * k) % 12000;
    const bool taken = std::any_of(reserved.begin(), reserved.end(),
                                   [p](const PortRange& r) { return p >= r.first && p <= r.second; });
    if (!taken && std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  }
  return ports;
}

std::vector<PortRange> ReservedPorts(const std::string& slurm_conf) {
  std::vector<PortRange> out = {{29500, 29500}, {29400, 29400}};
  PortRange ctld{6817, 6817}, slurmd{6818, 6818};
  std::ifstream in(slurm_conf);
  // key=value lines, case-insensitive keys; a range is "a-b".
  auto range = [](const std::string& v, PortRange* r) {
    char* end = nullptr;
    const long long a = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || a < 1) return;
    long long b = a;
    if (*end == '-') b = std::strtoll(end + 1, nullptr, 10);
    if (b >= a) *r = {a, b};
  };
  for (std::string line; std::getline(in, line);) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    if (key == "slurmctldport") range(value, &ctld);
    if (key == "slurmdport") range(value, &slurmd);
    if (key == "srunportrange") {
      PortRange r{0, -1};
      range(value, &r);
      if (r.second >= r.first) out.push_back(r);
    }
  }
  out.push_back(ctld);
  out.push_back(slurmd);
  return out;
}

int64_t PortForJob(int64_t job_id, int64_t step_id, int64_t restart) {
  const auto ports = RendezvousPorts(job_id, step_id, restart, ReservedPorts(SlurmConfPath()));
  return ports.empty() ? 0 : ports[0];
}

std::string EphemeralPortWarning(int64_t port, const std::string& range_file) {
  std::ifstream in(range_file);
  int64_t low = 0, high = 0;
  if (!(in >> low >> high) || port < low || port > high) return "";
  return "rendezvous port " + std::to_string(port) + " lies in this node's ephemeral port range " +
         std::to_string(low) + "-" + std::to_string(high) + " (" + range_file +
         "): an outgoing connection may already hold it; set MASTER_PORT below " + std::to_string(low) + " or above " +
         std::to_string(high);
}

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("host list '" + list + "': " + why);
  };
  std::vector<std::string> hosts;
  for (const std::string& item : SplitTop(list)) {
    if (item.empty()) return bad("empty host name");
    // Expand the first bracket group, then recurse on the rest.
    const auto open = item.find('[');
    if (open == std::string::npos) {
      if (item.find(']') != std::string::npos) return bad("']' without '['");
      hosts.push_back(item);
      continue;
    }
    const auto close = item.find(']', open);
    if (close == std::string::npos) return bad("'[' without ']'");
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    const std::string ranges = item.substr(open + 1, close - open - 1);
    if (ranges.empty()) return bad("empty brackets");
    std::vector<std::string> expanded;
    size_t start = 0;
    while (start <= ranges.size()) {
      size_t comma = ranges.find(',', start);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string r = ranges.substr(start, comma - start);
      const auto dash = r.find('-');
      const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
      if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
          hi.find_first_not_of("0123456789") != std::string::npos) {
        return bad("'" + r + "' is not a number or a range of numbers");
      }
      const long long a = std::stoll(lo), b = std::stoll(hi);
      if (b < a) return bad("range '" + r + "' runs backwards");
      if (b - a > 100000) return bad("range '" + r + "' is too large");
      const size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
      for (long long v = a; v <= b; ++v) {
        std::string num = std::to_string(v);
        if (num.size() < width) num = std::string(width - num.size(), '0') + num;
        expanded.push_back(prefix + num);
      }
      start = comma + 1;
    }
    for (const auto& e : expanded) {
      auto rest = ExpandHostlist(e + suffix);
      if (!rest.ok()) return bad(rest.status().message());
      hosts.insert(hosts.end(), rest->begin(), rest->end());
    }
  }
  return hosts;
}

StatusOr<std::vector<int64_t>> ExpandTasksPerNode(const std::string& list) {
  std::vector<int64_t> out;
  auto bad = [&] {
    return Status::InvalidArgument("tasks per node '" + list + "': expected counts like 4(x2),1");
  };
  for (const std::string& item : SplitTop(list)) {
    const auto open = item.find("(x");
    const std::string count = item.substr(0, open);
    int64_t repeat = 1;
    if (count.empty() || count.find_first_not_of("0123456789") != std::string::npos || count.size() > 9) return bad();
    if (open != std::string::npos) {
      const std::string r = item.substr(open + 2, item.size() - open - 3);
      if (item.back() != ')' || r.empty() || r.find_first_not_of("0123456789") != std::string::npos || r.size() > 6) {
        return bad();
      }
      repeat = std::stoll(r);
    }
    for (int64_t i = 0; i < repeat; ++i) out.push_back(std::stoll(count));
  }
  return out;
}

namespace {

// Slurm's own containers (srun --container, oci.conf) give a task the
// step's variables but not its own (no SLURM_PROCID, SLURM_LOCALID or
// SLURM_NODEID in Slurm 22.05), and run one task per node. The task's rank
// is then its node's place in SLURM_STEP_NODELIST, found by host name (the
// container shares its node's). Empty when the variables are there or this
// is not such a container.
StatusOr<std::map<std::string, std::string>> ContainerTaskVariables(
    const std::function<const char*(const char*)>& getenv) {
  std::map<std::string, std::string> task;
  const char* nodes = getenv("SLURM_STEP_NODELIST");
  const char* tasks = getenv("SLURM_STEP_NUM_TASKS");
  if (getenv("SLURM_CONTAINER") == nullptr || getenv("SLURM_PROCID") != nullptr ||
      getenv("TORCHELASTIC_RUN_ID") != nullptr || nodes == nullptr || tasks == nullptr) {
    return task;
  }
  auto hosts = ExpandHostlist(nodes);
  if (!hosts.ok()) return Status::InvalidArgument("environment variable SLURM_STEP_NODELIST: " + hosts.status().message());
  auto n = Int("SLURM_STEP_NUM_TASKS", tasks, 1);
  if (!n.ok()) return n.status();
  if (*n != static_cast<int64_t>(hosts->size())) {
    return Status::InvalidArgument("SLURM_CONTAINER: Slurm's own containers give a task no SLURM_PROCID, so scdino takes "
                                   "the rank from the node, which needs one task per node; this step has " +
                                   std::to_string(*n) + " tasks on " + std::to_string(hosts->size()) +
                                   " nodes (use --ntasks-per-node=1, or Pyxis)");
  }
  std::string here = ThisHostName();
  const auto it = std::find_if(hosts->begin(), hosts->end(), [&](const std::string& h) {
    return h == here || h == here.substr(0, here.find('.'));
  });
  if (it == hosts->end()) {
    return Status::InvalidArgument("SLURM_CONTAINER: this host, " + here + ", is not in SLURM_STEP_NODELIST (" + nodes +
                                   "), so its rank cannot be told (Slurm's own containers give a task no SLURM_PROCID)");
  }
  const std::string rank = std::to_string(it - hosts->begin());
  task = {{"SLURM_PROCID", rank}, {"SLURM_NODEID", rank}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", tasks}};
  return task;
}

using Getenv = std::function<const char*(const char*)>;

// The integer variable `name`, when set, into *out (at least `min`).
Status ReadInt(const Getenv& getenv, const char* name, int64_t min, int64_t* out) {
  const char* v = getenv(name);
  if (v == nullptr) return Status::Ok();
  auto x = Int(name, v, min);
  if (!x.ok()) return x.status();
  *out = *x;
  return Status::Ok();
}

// Inside a Slurm step: a RANK, WORLD_SIZE or LOCAL_RANK that differs from
// Slurm's was left in the submitting shell; said in info->notes.
void NoteLeakedRankVariables(const Getenv& getenv, LaunchInfo* info) {
  for (auto [ours, slurms] : {std::pair<const char*, const char*>{"RANK", "SLURM_PROCID"}, {"WORLD_SIZE", "SLURM_NTASKS"},
                              {"LOCAL_RANK", "SLURM_LOCALID"}}) {
    const char* leaked = getenv(ours);
    const char* slurm = getenv(slurms);
    if (leaked != nullptr && (slurm == nullptr || std::string(leaked) != slurm)) {
      info->notes.push_back(std::string(ours) + "=" + leaked + " in the environment is ignored: this is a Slurm step, "
                           "where " + slurms + "=" + (slurm ? slurm : "(unset)") + " says where the task is (a " + ours +
                           " left in the submitting shell reaches every task; unset it, or submit with "
                           "--export=NONE)");
    }
  }
}

// torchrun's variables (RANK, WORLD_SIZE, LOCAL_*, MASTER_*, TORCHELASTIC_*).
Status TorchrunLaunch(const Getenv& getenv, LaunchInfo* info) {
  info->source = "torchrun";
  for (auto [name, min, out] : {std::tuple<const char*, int64_t, int64_t*>{"RANK", 0, &info->rank},
                                {"WORLD_SIZE", 1, &info->world_size},
                                {"LOCAL_RANK", 0, &info->local_rank},
                                {"LOCAL_WORLD_SIZE", 1, &info->local_world_size},
                                {"MASTER_PORT", 1, &info->master_port}}) {
    if (auto s = ReadInt(getenv, name, min, out); !s.ok()) return s;
  }
  if (getenv("LOCAL_WORLD_SIZE") == nullptr) info->local_world_size = info->local_rank + 1;
  if (const char* a = getenv("MASTER_ADDR")) info->master_addr = a;
  const char* run_id = getenv("TORCHELASTIC_RUN_ID");
  const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
  info->attempt = std::string("torchrun run ") + (run_id ? run_id : "-") + " restart " + (restart ? restart : "0");
  return Status::Ok();
}

// Slurm's variables: the task, the job's attempt and its rendezvous ports,
// the tasks on this node and the first node of the step (MASTER_ADDR and
// MASTER_PORT win).
Status SlurmLaunch(const Getenv& getenv, LaunchInfo* info) {
  info->source = "slurm";
  int64_t job = 0, step = 0;
  for (auto [name, min, out] : {std::tuple<const char*, int64_t, int64_t*>{"SLURM_PROCID", 0, &info->rank},
                                {"SLURM_NTASKS", 1, &info->world_size},
                                {"SLURM_LOCALID", 0, &info->local_rank},
                                {"SLURM_JOB_ID", 0, &job}}) {
    if (auto s = ReadInt(getenv, name, min, out); !s.ok()) return s;
  }
  // The batch step's id is "batch", an interactive one "extern": step 0.
  if (const char* st = getenv("SLURM_STEP_ID"); st != nullptr && std::isdigit(static_cast<unsigned char>(st[0]))) {
    if (auto s = ReadInt(getenv, "SLURM_STEP_ID", 0, &step); !s.ok()) return s;
  }
  int64_t restart = 0;
  if (auto s = ReadInt(getenv, "SLURM_RESTART_COUNT", 0, &restart); !s.ok()) return s;
  const char* conf = getenv("SLURM_CONF");
  const std::string conf_path = conf != nullptr && *conf ? conf : "/etc/slurm/slurm.conf";
  const auto reserved = ReservedPorts(conf_path);
  info->port_candidates = RendezvousPorts(job, step, restart, reserved);
  if (info->port_candidates.empty() && getenv("MASTER_PORT") == nullptr) {
    std::string ranges;
    for (const auto& [a, b] : reserved) {
      ranges += (ranges.empty() ? "" : ", ") + std::to_string(a) + (a == b ? "" : "-" + std::to_string(b));
    }
    return Status::InvalidArgument(
        "no rendezvous port is left in " + std::to_string(kRendezvousPortFirst) + "-" +
        std::to_string(kRendezvousPortFirst + kRendezvousPortCount - 1) + ": " + conf_path +
        " reserves " + ranges + " for torchrun and Slurm, and its SrunPortRange covers the whole rendezvous "
        "range; narrow SrunPortRange, or set MASTER_PORT to a free port outside it");
  }
  if (!info->port_candidates.empty()) info->master_port = info->port_candidates[0];
  info->attempt = "slurm job " + std::to_string(job) + " step " + std::to_string(step) + " restart " +
                 std::to_string(restart);
  // Tasks on this node: SLURM_STEP_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID.
  info->local_world_size = info->local_rank + 1;
  if (const char* tpn = getenv("SLURM_STEP_TASKS_PER_NODE") ? getenv("SLURM_STEP_TASKS_PER_NODE")
                                                             : getenv("SLURM_TASKS_PER_NODE")) {
    int64_t node = 0;
    if (auto s = ReadInt(getenv, "SLURM_NODEID", 0, &node); !s.ok()) return s;
    auto counts = ExpandTasksPerNode(tpn);
    if (!counts.ok()) return counts.status();
    if (node < static_cast<int64_t>(counts->size())) info->local_world_size = (*counts)[static_cast<size_t>(node)];
  }
  const char* nodes = getenv("SLURM_STEP_NODELIST");
  const char* which = "SLURM_STEP_NODELIST";
  if (nodes == nullptr) {
    nodes = getenv("SLURM_JOB_NODELIST");
    which = "SLURM_JOB_NODELIST";
  }
  if (nodes != nullptr) {
    auto hosts = ExpandHostlist(nodes);
    if (!hosts.ok()) return Status::InvalidArgument(std::string("environment variable ") + which + ": " +
                                                    hosts.status().message());
    info->master_addr = hosts->front();
  }
  if (const char* a = getenv("MASTER_ADDR")) info->master_addr = a;
  if (getenv("MASTER_PORT") != nullptr) {
    if (auto s = ReadInt(getenv, "MASTER_PORT", 1, &info->master_port); !s.ok()) return s;
    info->port_candidates = {info->master_port};  // the user's choice: that port alone
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LaunchInfo> LaunchFromEnv(const std::function<const char*(const char*)>& getenv) {
  auto task = ContainerTaskVariables(getenv);
  if (!task.ok()) return task.status();
  if (!task->empty()) {
    return LaunchFromEnv([&](const char* name) -> const char* {
      const auto it = task->find(name);
      return it != task->end() ? it->second.c_str() : getenv(name);
    });
  }
  LaunchInfo info;
  // Inside a Slurm step, Slurm's variables say where this task is, unless
  // torchrun started it (TORCHELASTIC_RUN_ID): a RANK or WORLD_SIZE beside
  // them was left in the submitting shell (sbatch exports it to every task),
  // and taking it would make one job several one-rank runs. A launcher that
  // starts its own ranks inside a step unsets SLURM_PROCID for them.
  const bool in_slurm_step = getenv("SLURM_PROCID") != nullptr && getenv("SLURM_NTASKS") != nullptr &&
                             getenv("TORCHELASTIC_RUN_ID") == nullptr;
  if (in_slurm_step) NoteLeakedRankVariables(getenv, &info);
  Status s;
  if (!in_slurm_step && getenv("RANK") != nullptr && getenv("WORLD_SIZE") != nullptr) {
    s = TorchrunLaunch(getenv, &info);
  } else if (getenv("SLURM_PROCID") != nullptr && getenv("SLURM_NTASKS") != nullptr) {
    s = SlurmLaunch(getenv, &info);
  }
  if (!s.ok()) return s;
  if (info.port_candidates.empty()) info.port_candidates = {info.master_port};
  info.attempt += " at " + info.master_addr + ":" + std::to_string(info.master_port);
  if (info.rank >= info.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(info.rank) + " is not below the world size " +
                                   std::to_string(info.world_size) + " (" + info.source + " variables)");
  }
  return info;
}

}  // namespace scdino::run
