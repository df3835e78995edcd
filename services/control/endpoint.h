// Endpoint files: how scdinoctl and other services find a run's server.
// <run_dir>/endpoints/<service>.json, written atomically on start and
// removed on a clean exit. Each carries a proof (an HMAC keyed by the run's
// token over its own fields), so a client sends the token only to an
// address the token's holder wrote; docs/control.md#trust-model.
// Functions of their arguments; thread-safe.
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
  /// With TLS: the server's certificate, its fingerprint ("sha256:...") and
  /// the name it is issued to; a client trusts that certificate alone.
  std::string tls_cert, tls_fingerprint, tls_name;
  /// Which process wrote the file: its pid namespace (/proc/self/ns/pid) and
  /// start time in clock ticks after boot (/proc/self/stat), so a client on
  /// the same host can tell a live server from a dead one whose pid was
  /// reused (EndpointProcessState).
  std::string pid_namespace, process_start;
  /// The writer's host name (gethostname): which node the pid is of, also
  /// when `host` is a listen address such as 127.0.0.1. Not covered by the
  /// proof: it decides only whether a client calls the file stale, never
  /// where a token goes.
  std::string node;
  std::string run_dir;  ///< absolute
  std::string proof;    ///< TokenProof(token, ProofMessage())
  std::string target() const { return host + ":" + std::to_string(port); }
  /// The fields the proof covers, in a fixed order.
  std::string ProofMessage() const;
};

std::string EndpointPath(const std::string& run_dir, const std::string& service);

/// Fields 3 (the state: R, S, ..., Z once ended and not yet reaped) and 22
/// (the start time in clock ticks after boot) of a /proc/<pid>/stat file;
/// empty where it cannot be read.
struct ProcStat {
  std::string state, start_ticks;
};
ProcStat ReadProcStat(const std::string& stat_path);

/// This process's pid namespace and start time, as an Endpoint records them.
void RecordThisProcess(Endpoint* e);

enum class ProcessState { kRunning, kGone, kUnknown };
/// Whether the process that wrote `e` still runs, as far as this process
/// can tell: kGone when it ran on this host (`this_host`) in this pid
/// namespace and its pid is free, taken by a process started later, or its
/// process has ended and is not reaped yet (a zombie);
/// kUnknown from another host or namespace (the pinned certificate still
/// keeps the token from whoever listens there now).
ProcessState EndpointProcessState(const Endpoint& e, const std::string& this_host);
/// The message a client gives for a gone process's endpoint file.
std::string StaleEndpointMessage(const Endpoint& e, const std::string& path);
/// Writes the file with its proof computed from `token` (mode 0644: others
/// may read where the server is, never the token).
Status WriteEndpoint(const std::string& run_dir, Endpoint e, const std::string& token);
/// Reads an endpoint file the way a client must: opened with O_NOFOLLOW,
/// checked on the open descriptor (a regular file owned by the calling user
/// that no one else can write). NotFound names the file when the service has
/// not started (or has ended).
StatusOr<Endpoint> ReadEndpoint(const std::string& run_dir, const std::string& service);
/// FailedPrecondition unless the endpoint's proof matches `token`.
Status VerifyEndpoint(const Endpoint& e, const std::string& token, const std::string& path);
void RemoveEndpoint(const std::string& run_dir, const std::string& service);

/// How a service ended, left beside the endpoint file when the service
/// removes it (<run_dir>/endpoints/<service>.ended.json) and removed when it
/// starts again: a follower that was not watching at the end (scdino-eval
/// --follow started late, or between two watches) learns from it that
/// nothing more will come.
struct ServiceEnded {
  std::string service;
  std::string state;  ///< COMPLETED | FAILED | STOPPED
  std::string error;
  int64_t end_unix_ms = 0;
  std::string host, slurm_job_id;
  int64_t pid = 0;
  int exit_code = -1;  ///< the process's exit code (docs/exit-codes.md); -1: not known (it ended early)
  /// What the batch scripts do with that code: "always" (requeued),
  /// "after a job-wide signal", "never"; empty: not known.
  std::string requeue;
};
std::string EndedPath(const std::string& run_dir, const std::string& service);
Status WriteEnded(const std::string& run_dir, const ServiceEnded& e);
/// NotFound when the service has not ended since it last started; read
/// with the endpoint file's checks.
StatusOr<ServiceEnded> ReadEnded(const std::string& run_dir, const std::string& service);
void RemoveEnded(const std::string& run_dir, const std::string& service);

}  // namespace scdino::control
