#include "metrics/exporter.h"

#include <poll.h>
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>
#include <prometheus/metric_family.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/files.h"

namespace scdino::metrics {

namespace {

// Resident memory read at scrape time from /proc/self/statm.
class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string name) : name_(std::move(name)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::ifstream statm("/proc/self/statm");
    long pages_total = 0, pages_resident = 0;
    statm >> pages_total >> pages_resident;
    prometheus::MetricFamily f;
    f.name = name_;
    f.help = "Resident set size of this process";
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    m.gauge.value = static_cast<double>(pages_resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    f.metric.push_back(m);
    return {f};
  }

 private:
  std::string name_;
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
  e->process_ = std::make_shared<ProcessCollector>(prefix + "resident_memory_bytes");
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
    std::string name = o.run + "_" + o.service + "_rank" + std::to_string(o.rank);
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

void Exporter::Serve() {
  const prometheus::TextSerializer serializer;
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    std::string status = "404 Not Found", body = "scdino: metrics are at /metrics\n";
    if (request.rfind("GET /metrics", 0) == 0) {
      auto families = registry_->Collect();
      for (auto& f : process_->Collect()) families.push_back(std::move(f));
      status = "200 OK";
      body = serializer.Serialize(families);
    }
    const std::string response = "HTTP/1.1 " + status +
                                 "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    for (size_t off = 0; off < response.size();) {
      const ssize_t n = ::send(fd, response.data() + off, response.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fd);
  }
}

Exporter::~Exporter() {
  stop_.store(true);
  if (server_.joinable()) server_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (!file_sd_path_.empty()) (void)Env::Default()->RemoveFile(file_sd_path_);
}

}  // namespace scdino::metrics
