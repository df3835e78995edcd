// The Prometheus endpoint of one process: a prometheus-cpp registry served
// over HTTP, the metrics every service has (build/run info, resident memory,
// refused control calls), and a file_sd file so that Prometheus finds the
// process (written on start, removed on exit).
//
// The HTTP side is a small listener of our own rather than prometheus-cpp's
// civetweb Exposer: civetweb starts its threads with a fixed small stack, and
// in a process that loads LibTorch (whose static thread-local storage is
// larger than that stack) pthread_create fails, so the Exposer cannot start.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace scdino::metrics {

struct ExporterOptions {
  /// Address to listen on; port 0 picks a free port (see port()).
  std::string listen_address = "0.0.0.0";
  int port = 0;
  /// Directory of Prometheus file_sd files (shared file system); empty: none.
  std::string file_sd_dir;
  /// trainer | features | eval: the metric prefix scdino_<service>_.
  std::string service = "trainer";
  /// Target labels (file_sd); slurm_job_id is empty outside Slurm; node is
  /// the node as Slurm names it (the join key with node and GPU exporters).
  std::string run, slurm_job_id, node;
  /// The host Prometheus scrapes (resolvable from the head node); empty: node.
  std::string address;
  int64_t rank = 0;
};

/// Thread-safe after Start (prometheus-cpp metrics are).
class Exporter {
 public:
  static StatusOr<std::unique_ptr<Exporter>> Start(const ExporterOptions& options);
  ~Exporter();

  int port() const { return port_; }
  prometheus::Registry& registry() { return *registry_; }
  /// scdino_<service>_control_unauthenticated_requests_total.
  prometheus::Counter& unauthenticated() { return *unauthenticated_; }
  /// The file_sd file written, or empty.
  const std::string& file_sd_path() const { return file_sd_path_; }

 private:
  Exporter() = default;
  ExporterOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> process_;
  void Serve();
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread server_;
  prometheus::Counter* unauthenticated_ = nullptr;
  std::string file_sd_path_;
  int port_ = 0;
};

}  // namespace scdino::metrics
