#include "control/endpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/files.h"
#include "control/token.h"

namespace scdino::control {

std::string Endpoint::ProofMessage() const {
  return "scdino-endpoint-v2\n" + service + "\n" + host + "\n" + std::to_string(port) + "\n" + std::to_string(pid) +
         "\n" + std::to_string(start_unix_ms) + "\n" + (tls ? "tls" : "plaintext") + "\n" + tls_cert + "\n" +
         tls_fingerprint + "\n" + tls_name + "\n" + pid_namespace + "\n" + process_start + "\n" + run_dir;
}

namespace {

std::string Link(const std::string& path) {
  char buf[256];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

// The command name in field 2 may hold spaces and parentheses: fields are
// counted from its closing parenthesis.
ProcStat ReadProcStat(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(text.substr(close + 1));
  ProcStat stat;
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3) stat.state = field;
    if (i == 22) stat.start_ticks = field;
  }
  return stat;
}

void RecordThisProcess(Endpoint* e) {
  e->pid_namespace = Link("/proc/self/ns/pid");
  e->process_start = ReadProcStat("/proc/self/stat").start_ticks;
  e->node = ThisHostName();
}

ProcessState EndpointProcessState(const Endpoint& e, const std::string& this_host) {
  // Files of older versions have no node: their host was the host name.
  const std::string& node = e.node.empty() ? e.host : e.node;
  if (e.pid <= 0 || node != this_host || e.pid_namespace.empty() || e.pid_namespace != Link("/proc/self/ns/pid")) {
    return ProcessState::kUnknown;
  }
  const std::string proc = "/proc/" + std::to_string(e.pid);
  if (!std::filesystem::exists(proc)) return ProcessState::kGone;
  const ProcStat stat = ReadProcStat(proc + "/stat");
  if (!e.process_start.empty() && !stat.start_ticks.empty() && stat.start_ticks != e.process_start) {
    return ProcessState::kGone;
  }
  // Ended, not yet reaped (a client sees its connections close first).
  if (stat.state == "Z" || stat.state == "X") return ProcessState::kGone;
  return ProcessState::kRunning;
}

std::string StaleEndpointMessage(const Endpoint& e, const std::string& path) {
  return path + ": stale endpoint file: the " + e.service + " process " + std::to_string(e.pid) + " on " + e.host +
         " that wrote it has ended without removing it (killed, or out of memory?); nothing was sent to " +
         e.target() + ". The next start of the " + e.service + " replaces it";
}

std::string EndpointPath(const std::string& run_dir, const std::string& service) {
  return run_dir + "/endpoints/" + service + ".json";
}

Status WriteEndpoint(const std::string& run_dir, Endpoint e, const std::string& token) {
  if (auto s = MakeDirs(run_dir + "/endpoints"); !s.ok()) return s;
  e.proof = TokenProof(token, e.ProofMessage());
  nlohmann::json j = {{"service", e.service},
                      {"host", e.host},
                      {"port", e.port},
                      {"pid", e.pid},
                      {"slurm_job_id", e.slurm_job_id},
                      {"slurm_step_id", e.slurm_step_id},
                      {"start_unix_ms", e.start_unix_ms},
                      {"tls", e.tls},
                      {"tls_cert", e.tls_cert},
                      {"tls_fingerprint", e.tls_fingerprint},
                      {"tls_name", e.tls_name},
                      {"pid_namespace", e.pid_namespace},
                      {"process_start", e.process_start},
                      {"node", e.node},
                      {"run_dir", e.run_dir},
                      {"proof", e.proof}};
  return WriteFileAtomic(EndpointPath(run_dir, e.service), j.dump(2) + "\n");
}

StatusOr<Endpoint> ReadEndpoint(const std::string& run_dir, const std::string& service) {
  const std::string path = EndpointPath(run_dir, service);
  auto text = ReadOwnFile(path, "the endpoint file", Exposure::kNotWritableByOthers, 1 << 16);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(path + ": no endpoint file; is the " + service + " of this run running?");
    }
    return text.status();
  }
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
    e.tls_cert = j.value("tls_cert", "");
    e.tls_fingerprint = j.value("tls_fingerprint", "");
    e.tls_name = j.value("tls_name", "");
    e.pid_namespace = j.value("pid_namespace", "");
    e.process_start = j.value("process_start", "");
    e.node = j.value("node", "");
    e.run_dir = j.value("run_dir", "");
    e.proof = j.value("proof", "");
    if (e.port <= 0 || e.port > 65535) return Status::DataLoss(path + ": port " + std::to_string(e.port) + " is not a TCP port");
    return e;
  } catch (const std::exception& ex) {
    return Status::DataLoss(path + ": not an endpoint file (expected JSON with host and port): " + ex.what());
  }
}

Status VerifyEndpoint(const Endpoint& e, const std::string& token, const std::string& path) {
  if (e.proof.empty() || !TokensEqual(e.proof, TokenProof(token, e.ProofMessage()))) {
    return Status::FailedPrecondition(path + ": the endpoint file was not written by this run (its proof does not "
                                      "match the run's control token); refusing to send the token to " +
                                      e.target());
  }
  return Status::Ok();
}

void RemoveEndpoint(const std::string& run_dir, const std::string& service) {
  (void)Env::Default()->RemoveFile(EndpointPath(run_dir, service));
}

std::string EndedPath(const std::string& run_dir, const std::string& service) {
  return run_dir + "/endpoints/" + service + ".ended.json";
}

Status WriteEnded(const std::string& run_dir, const ServiceEnded& e) {
  if (auto s = MakeDirs(run_dir + "/endpoints"); !s.ok()) return s;
  nlohmann::json j = {{"service", e.service}, {"state", e.state},   {"error", e.error},
                      {"end_unix_ms", e.end_unix_ms}, {"host", e.host}, {"slurm_job_id", e.slurm_job_id},
                      {"pid", e.pid}};
  if (e.exit_code >= 0) j["exit_code"] = e.exit_code;
  if (!e.requeue.empty()) j["requeue"] = e.requeue;
  return WriteFileAtomic(EndedPath(run_dir, e.service), j.dump(2) + "\n");
}

StatusOr<ServiceEnded> ReadEnded(const std::string& run_dir, const std::string& service) {
  const std::string path = EndedPath(run_dir, service);
  auto text = ReadOwnFile(path, "the end record", Exposure::kNotWritableByOthers, 1 << 16);
  if (!text.ok()) return text.status();
  try {
    auto j = nlohmann::json::parse(*text);
    ServiceEnded e;
    e.service = j.at("service").get<std::string>();
    e.state = j.at("state").get<std::string>();
    e.error = j.value("error", "");
    e.end_unix_ms = j.value("end_unix_ms", int64_t{0});
    e.host = j.value("host", "");
    e.slurm_job_id = j.value("slurm_job_id", "");
    e.pid = j.value("pid", int64_t{0});
    e.exit_code = j.value("exit_code", -1);
    e.requeue = j.value("requeue", "");
    if (e.state != "COMPLETED" && e.state != "FAILED" && e.state != "STOPPED") {
      return Status::DataLoss(path + ": state \"" + e.state + "\" is not COMPLETED, FAILED or STOPPED");
    }
    return e;
  } catch (const std::exception& ex) {
    return Status::DataLoss(path + ": not an end record (expected JSON with service and state): " + ex.what());
  }
}

void RemoveEnded(const std::string& run_dir, const std::string& service) {
  (void)Env::Default()->RemoveFile(EndedPath(run_dir, service));
}

}  // namespace scdino::control
