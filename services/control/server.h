// The control server a service's rank 0 runs: scdino.v1.Control (and, for
// the trainer, scdino.v1.Trainer) over a RunControl, plus gRPC health
// checking and server reflection (control/reflection.h). Every Control,
// Trainer and reflection call must carry the run's token (health checking
// needs none: it says SERVING or NOT_SERVING, nothing of the run); refused
// calls are counted and logged without the token.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "run/checkpoint_files.h"
#include "run/run_control.h"
#include "common/status.h"

namespace grpc {
class Server;
class Status;
}  // namespace grpc

namespace scdino::control {

/// What one process's control server holds at most: threads (each call of
/// the synchronous server takes one; a call past the cap is refused with
/// RESOURCE_EXHAUSTED), WatchStatus streams (fewer, so that streams never
/// take the threads the short calls need), and streams on one connection.
inline constexpr int kMaxServerThreads = 96;
inline constexpr int kMaxWatchStreams = 32;
inline constexpr int kMaxStreamsPerConnection = 64;

struct ServerOptions {
  /// host:port to listen on; port 0 picks a free port (see port()).
  std::string listen_address = "0.0.0.0:0";
  /// The token every call must present (required).
  std::string token;
  /// Where it lives: a call with another token makes the server read the
  /// file again if it changed (scdinoctl rotate-token); the old token is
  /// refused from then on. Empty: the token never changes.
  std::string token_file;
  /// PEM files; both set: TLS, both empty: plaintext.
  std::string tls_cert_file, tls_key_file;
  /// trainer | features | eval.
  std::string service = "trainer";
  /// Status.run.
  std::string run_id, run_dir, slurm_job_id, slurm_step_id, host;
  int64_t world_size = 1;
  int64_t start_unix_ms = 0;
  /// Called for every refused call (a metric counts them).
  std::function<void()> on_unauthenticated;
  /// Where log lines go (default: standard error). Refused calls are logged
  /// at most `refused_log_burst` per `refused_log_window`, then summarised,
  /// so a flood of bad calls cannot fill the job's log.
  std::function<void(const std::string&)> log;
  int refused_log_burst = 10;
  std::chrono::seconds refused_log_window{60};
};

/// Thread-safe; gRPC's threads serve calls until Shutdown or destruction.
class ControlServer {
 public:
  static StatusOr<std::unique_ptr<ControlServer>> Start(ServerOptions options, RunControl* control);
  ~ControlServer();
  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }
  int64_t refused_calls() const { return refused_->load(); }
  /// grpc.health.v1 says NOT_SERVING for every service from now on (a
  /// Watch stream gets it at once): the process is ending. Calls are still
  /// answered until Shutdown.
  void StopServing();
  /// NOT_SERVING (StopServing), then ends open streams and stops.
  void Shutdown();

 private:
  ControlServer() = default;
  class Impl;
  ServerOptions options_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<std::atomic<int64_t>> refused_ = std::make_shared<std::atomic<int64_t>>(0);
  int port_ = 0;
};

/// The one mapping from our Status codes to gRPC's.
grpc::Status ToGrpcStatus(const Status& s);

}  // namespace scdino::control
