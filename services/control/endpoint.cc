#include "control/endpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace scdino::control {

std::string EndpointPath(const std::string& run_dir, const std::string& service) {
  return run_dir + "/endpoints/" + service + ".json";
}

Status WriteEndpoint(const std::string& run_dir, const Endpoint& e) {
  if (auto s = MakeDirs(run_dir + "/endpoints"); !s.ok()) return s;
  nlohmann::json j = {{"service", e.service},
                      {"host", e.host},
                      {"port", e.port},
                      {"pid", e.pid},
                      {"slurm_job_id", e.slurm_job_id},
                      {"slurm_step_id", e.slurm_step_id},
                      {"start_unix_ms", e.start_unix_ms},
                      {"tls", e.tls},
                      {"token_file", e.token_file}};
  return WriteFileAtomic(EndpointPath(run_dir, e.service), j.dump(2) + "\n");
}

StatusOr<Endpoint> ReadEndpoint(const std::string& run_dir, const std::string& service) {
  const std::string path = EndpointPath(run_dir, service);
  if (!FileExists(path)) {
    return Status::NotFound(path + ": no endpoint file; is the " + service + " of this run running?");
  }
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  try {
    auto j = nlohmann::json::parse(*text);
    Endpoint e;
    e.service = j.at("service").get<std::string>();
    e.host = j.at("host").get<std::string>();
    e.port = j.at("port").get<int>();
    e.pid = j.value("pid", int64_t{0});
    e.slurm_job_id = j.value("slurm_job_id", "");
    e.slurm_step_id = j.value("slurm_step_id", "");
    e.start_unix_ms = j.value("start_unix_ms", int64_t{0});
    e.tls = j.value("tls", false);
    e.token_file = j.value("token_file", "");
    return e;
  } catch (const std::exception& ex) {
    return Status::DataLoss(path + ": not an endpoint file (expected JSON with host and port): " + ex.what());
  }
}

void RemoveEndpoint(const std::string& run_dir, const std::string& service) {
  std::error_code ec;
  std::filesystem::remove(EndpointPath(run_dir, service), ec);
}

}  // namespace scdino::control
