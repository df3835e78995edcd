#include "metrics/exporter.h"

#include <poll.h>
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>
#include <prometheus/metric_family.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <vector>
#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/files.h"

namespace scdino::metrics {

namespace {

prometheus::MetricFamily OneValue(const std::string& name, const std::string& help, prometheus::MetricType type,
                                  double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  (type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value) = value;
  f.metric.push_back(m);
  return f;
}

// Prometheus's standard process metrics (what every official client
// library exports, under the same names), read at scrape time from /proc.
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> out;
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    // /proc/self/stat: the fields after the command's closing parenthesis;
    // utime and stime are the 14th and 15th, starttime the 22nd, vsize the
    // 23rd, rss the 24th (proc(5)).
    std::ifstream stat_file("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(stat.substr(close + 2));
      std::vector<std::string> f;
      for (std::string v; fields >> v;) f.push_back(v);
      // f[0] is field 3 (state).
      if (f.size() > 21) {
        const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
        out.push_back(OneValue("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                               MetricType::Counter, cpu));
        out.push_back(OneValue("process_start_time_seconds",
                               "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
                               BootTime() + std::stod(f[19]) / ticks));
        out.push_back(OneValue("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
                               std::stod(f[20])));
        out.push_back(OneValue("process_resident_memory_bytes", "Resident memory size in bytes.",
                               MetricType::Gauge, std::stod(f[21]) * page));
      }
    }
    std::error_code ec;
    double fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++fds;
    }
    out.push_back(OneValue("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, fds));
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      out.push_back(OneValue("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
                             static_cast<double>(limit.rlim_cur)));
    }
    return out;
  }

 private:
  // Seconds since the epoch at boot: /proc/stat's btime.
  static double BootTime() {
    std::ifstream in("/proc/stat");
    for (std::string key; in >> key;) {
      if (key == "btime") {
        double t = 0;
        in >> t;
        return t;
      }
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return 0;
  }
};

}  // namespace

StatusOr<std::unique_ptr<Exporter>> Exporter::Start(const ExporterOptions& o) {
  std::unique_ptr<Exporter> e(new Exporter());
  e->options_ = o;
  const std::string prefix = "scdino_" + o.service + "_";
  e->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name(prefix + "build_info")
      .Help("Always 1; the labels say which scdino build runs which run and rank")
      .Register(*e->registry_)
      // run, rank and the Slurm job are target labels already (file_sd).
      .Add({{"version", SCDINO_VERSION}})
      .Set(1);
  e->unauthenticated_ = &prometheus::BuildCounter()
                             .Name(prefix + "control_unauthenticated_requests_total")
                             .Help("Control API calls refused for a missing or wrong token")
                             .Register(*e->registry_)
                             .Add({});
  e->process_ = std::make_shared<ProcessCollector>();
  const std::string bind = o.listen_address + ":" + std::to_string(o.port);
  e->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.listen_address.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("metrics: listen address '" + o.listen_address + "' is not an IPv4 address");
  }
  const int one = 1;
  ::setsockopt(e->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof addr;
  if (e->listen_fd_ < 0 || ::bind(e->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(e->listen_fd_, 16) != 0 ||
      ::getsockname(e->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::Unavailable("metrics: cannot listen on " + bind + ": " + std::strerror(errno));
  }
  e->port_ = ntohs(addr.sin_port);
  e->server_ = std::thread([raw = e.get()] { raw->Serve(); });

  if (!o.file_sd_dir.empty()) {
    if (auto s = MakeDirs(o.file_sd_dir); !s.ok()) return s;
    // A combination's run is name_of_run/<combination>: one file name.
    std::string name = o.run + "_" + o.service + "_rank" + std::to_string(o.rank);
    std::replace(name.begin(), name.end(), '/', '_');
    if (!o.slurm_job_id.empty()) name += "_job" + o.slurm_job_id;
    e->file_sd_path_ = o.file_sd_dir + "/" + name + ".json";
    nlohmann::json target = {
        {"targets", {(o.address.empty() ? o.node : o.address) + ":" + std::to_string(e->port_)}},
        {"labels",
         // Not "job": that label is Prometheus' own (the scrape job), and a
         // target label of that name would replace it on every series.
         {{"run", o.run},
          {"service", o.service},
          {"rank", std::to_string(o.rank)},
          {"slurm_job_id", o.slurm_job_id},
          {"node", o.node}}}};
    if (auto s = WriteFileAtomic(e->file_sd_path_, nlohmann::json::array({target}).dump(2) + "\n"); !s.ok()) {
      e->file_sd_path_.clear();
      return s;
    }
  }
  return e;
}

// One thread serves every connection, none of them blocking: each reads
// and writes only what its socket has ready, within a deadline for the
// whole exchange, so a client that sends a byte a second (or never reads)
// holds its own connection until the deadline and nobody else's. At most
// kMaxConnections are open; a new one past that closes the oldest.
void Exporter::Serve() {
  using Clock = std::chrono::steady_clock;
  constexpr size_t kMaxConnections = 64;
  constexpr size_t kMaxRequest = 16384;
  const auto kDeadline = std::chrono::seconds(5);
  struct Connection {
    int fd;
    Clock::time_point deadline;
    std::string in, out;
    size_t sent = 0;
  };
  const prometheus::TextSerializer serializer;
  std::vector<Connection> open;
  auto respond = [&](Connection& c) {
    std::string status = "404 Not Found", body = "scdino: metrics are at /metrics\n";
    if (c.in.rfind("GET /metrics", 0) == 0) {
      auto families = registry_->Collect();
      for (auto& f : process_->Collect()) families.push_back(std::move(f));
      status = "200 OK";
      body = serializer.Serialize(families);
    }
    c.out = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  };
  while (!stop_.load()) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const auto& c : open) fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    if (::poll(fds.data(), fds.size(), 200) < 0) continue;
    const auto now = Clock::now();
    std::vector<bool> done(open.size(), false);
    for (size_t i = 0; i < open.size(); ++i) {
      Connection& c = open[i];
      const short ready = fds[i + 1].revents;
      if (ready & (POLLERR | POLLNVAL)) {
        done[i] = true;
      } else if (c.out.empty() && (ready & (POLLIN | POLLHUP))) {
        char buf[2048];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) c.in.append(buf, static_cast<size_t>(n));
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.size() >= kMaxRequest || n == 0) {
          if (n == 0 && c.in.empty()) {
            done[i] = true;
          } else {
            respond(c);
          }
        }
      } else if (!c.out.empty() && (ready & POLLOUT)) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) done[i] = true;
        if (c.sent == c.out.size()) done[i] = true;
      }
      if (now >= c.deadline) done[i] = true;
    }
    std::vector<Connection> kept;
    for (size_t i = 0; i < open.size(); ++i) {
      if (done[i]) {
        ::close(open[i].fd);
      } else {
        kept.push_back(std::move(open[i]));
      }
    }
    open = std::move(kept);
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (open.size() >= kMaxConnections) {
          ::close(open.front().fd);
          open.erase(open.begin());
        }
        open.push_back({fd, Clock::now() + kDeadline, {}, {}, 0});
      }
    }
  }
  for (const auto& c : open) ::close(c.fd);
}

Exporter::~Exporter() {
  stop_.store(true);
  if (server_.joinable()) server_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (!file_sd_path_.empty()) (void)Env::Default()->RemoveFile(file_sd_path_);
}

}  // namespace scdino::metrics
