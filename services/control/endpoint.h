// Endpoint files: how scdinoctl and other services find a run's server.
// <run_dir>/endpoints/<service>.json, written atomically on start and
// removed on a clean exit.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace scdino::control {

struct Endpoint {
  std::string service;  ///< trainer | features | eval
  std::string host;     ///< host name other nodes reach the server by
  int port = 0;
  int64_t pid = 0;
  std::string slurm_job_id, slurm_step_id;  ///< empty outside Slurm
  int64_t start_unix_ms = 0;
  bool tls = false;
  std::string token_file;  ///< where the run's token is (readable by the run's owner only)
  std::string target() const { return host + ":" + std::to_string(port); }
};

std::string EndpointPath(const std::string& run_dir, const std::string& service);
Status WriteEndpoint(const std::string& run_dir, const Endpoint& e);
/// NotFound names the file when the service has not started (or has ended).
StatusOr<Endpoint> ReadEndpoint(const std::string& run_dir, const std::string& service);
void RemoveEndpoint(const std::string& run_dir, const std::string& service);

}  // namespace scdino::control
