#include "process/service_plane.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>

#include "common/env.h"
#include "common/files.h"
#include "process/exit_codes.h"
#include "process/signals.h"

#ifdef SCDINO_WITH_SERVICES
#include "control/endpoint.h"
#include "control/server.h"
#include "control/tls.h"
#include "control/token.h"
#include "metrics/exporter.h"
#include "metrics/progress_metrics.h"
#include "metrics/status_metrics.h"
#endif

namespace scdino::process {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}


// The node as Slurm names it, which is how node_exporter and dcgm-exporter
// series are joined to jobs: SLURMD_NODENAME, else the short host name.
std::string NodeName(const std::string& host) {
  const std::string slurm = Env("SLURMD_NODENAME");
  return slurm.empty() ? host.substr(0, host.find('.')) : slurm;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Where callers reach a listener bound to LISTEN_HOST: that address where
// it is a specific one (a listener on 127.0.0.1 is not reached by the host's
// name where the name resolves to another address, as in a container), else
// the host's name.
std::string ReachableHost(const std::string& listen_host, const std::string& host) {
  return listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "[::]" ? host : listen_host;
}

}  // namespace

// What the process's stage sink reaches: the plane while it lives (its
// destructor clears it under the lock, so no report outlives it).
struct ServicePlane::StageTarget {
  std::mutex mu;
  ServicePlane* plane = nullptr;
};

struct ServicePlane::Parts {
  std::string service, run_dir, host, slurm_job_id;
  int64_t linger_seconds = 0;
#ifdef SCDINO_WITH_SERVICES
  std::unique_ptr<metrics::Exporter> exporter;
  std::unique_ptr<metrics::ProgressMetrics> progress;
  std::unique_ptr<metrics::StageMetrics> stages;
  std::unique_ptr<metrics::StatusMetrics> status;
  std::unique_ptr<control::ControlServer> server;
  std::vector<std::shared_ptr<void>> kept;
  // Follows the RunControl so the state metrics change when the state does.
  std::thread status_watcher;
  std::atomic<bool> stopping{false};
#endif
};

StatusOr<std::unique_ptr<ServicePlane>> ServicePlane::Start(const run::RunConfig& config,
                                                            const run::LaunchInfo& launch,
                                                            const ServiceOptions& options) {
  std::unique_ptr<ServicePlane> plane(new ServicePlane());
  plane->parts_ = std::make_unique<Parts>();
  Parts& p = *plane->parts_;
  p.service = options.service;
  p.run_dir = std::filesystem::absolute(config.run_dir()).string();
  p.linger_seconds = config.scdino.metrics.linger_seconds;
  const std::string tool = "scdino-" + options.service;
  // The progress's rate on every rank, its lines on rank 0's stderr (the
  // status is rank 0's too).
  if (!options.progress_unit.empty()) {
    plane->progress_ = std::make_unique<ProgressLog>(launch.rank == 0 ? &std::cerr : nullptr, tool,
                                                     options.progress_unit);
    plane->progress_->set_stage(options.progress_stage.empty() ? options.service : options.progress_stage);
  }
#ifdef SCDINO_WITH_SERVICES
  p.host = ThisHostName();
  p.slurm_job_id = Env("SLURM_JOB_ID");
  if (config.scdino.metrics.enabled) {
    if (auto s = plane->StartMetrics(config, launch, options); !s.ok()) return s;
  }
  if (config.scdino.control.enabled && launch.rank == 0) {
    if (auto s = plane->StartControl(config, launch, options); !s.ok()) return s;
  }
#else
  (void)launch;
  std::cerr << tool << ": built without the service layer: no control API, no metrics\n";
#endif
  plane->stage_target_ = std::make_shared<StageTarget>();
  plane->stage_target_->plane = plane.get();
  SetStageSink([target = plane->stage_target_](const StageProgress& s) {
    std::lock_guard<std::mutex> lock(target->mu);
    if (target->plane) target->plane->ReportStage(s);
  });
  return plane;
}

#ifdef SCDINO_WITH_SERVICES
// The metrics exporter of every rank (its file_sd target, the progress,
// stage and state metrics), and the thread that follows the state.
Status ServicePlane::StartMetrics(const run::RunConfig& config, const run::LaunchInfo& launch,
                                  const ServiceOptions& options) {
  Parts& p = *parts_;
  const std::string& host = p.host;
  const std::string& job = p.slurm_job_id;
  const std::string tool = "scdino-" + options.service;
  metrics::ExporterOptions mo;
  mo.listen_address = config.scdino.metrics.listen;
  mo.port = config.scdino.metrics.port > 0 ? static_cast<int>(config.scdino.metrics.port + launch.local_rank) : 0;
  mo.file_sd_dir = config.file_sd_dir();
  mo.service = options.service;
  mo.run = config.run_name();
  mo.slurm_job_id = job;
  mo.node = NodeName(host);
  mo.address = ReachableHost(mo.listen_address, host);
  mo.rank = launch.rank;
  auto e = metrics::Exporter::Start(mo);
  if (!e.ok()) return e.status();
  p.exporter = std::move(e).value();
  if (!options.progress_unit.empty()) {
    p.progress = std::make_unique<metrics::ProgressMetrics>(p.exporter->registry(), options.service,
                                                            options.progress_unit);
  }
  p.status = std::make_unique<metrics::StatusMetrics>(p.exporter->registry(), options.service);
  p.stages = std::make_unique<metrics::StageMetrics>(p.exporter->registry(), options.service);
  p.status_watcher = std::thread([raw = this] {
    Parts& parts = *raw->parts_;
    int64_t seen = -1;
    while (!parts.stopping.load()) {
      const RunStatus s = raw->control_.WaitForChange(seen, std::chrono::milliseconds(500));
      seen = s.revision;
      parts.status->Set(s);
    }
  });
  std::cerr << tool << ": rank " << launch.rank << " metrics on http://" << mo.address << ":" << p.exporter->port()
            << "/metrics" << (p.exporter->file_sd_path().empty() ? "" : ", target file " + p.exporter->file_sd_path())
            << "\n";
  return Status::Ok();
}

// Rank 0's control API: the token, TLS (a key and certificate of its own
// unless the config names them), the server, and the endpoint file that
// scdinoctl finds it by (a stale one of a killed start removed first).
Status ServicePlane::StartControl(const run::RunConfig& config, const run::LaunchInfo& launch,
                                  const ServiceOptions& options) {
  Parts& p = *parts_;
  const std::string& host = p.host;
  const std::string& job = p.slurm_job_id;
  const std::string tool = "scdino-" + options.service;
  if (auto s = MakeDirs(p.run_dir); !s.ok()) return s;
  auto token = control::LoadOrCreateToken(config.token_path());
  if (!token.ok()) return token.status();
  // The endpoint file of a start of this service that was killed: gone
  // now, so nobody acts on it while this start is setting up.
  if (auto old = control::ReadEndpoint(p.run_dir, options.service);
      old.ok() && control::EndpointProcessState(*old, host) == control::ProcessState::kGone) {
    control::RemoveEndpoint(p.run_dir, options.service);
    std::cerr << tool << ": removed the stale endpoint file of process " << old->pid
              << ", which ended without removing it\n";
  }
  control::TlsIdentity tls;
  if (config.scdino.control.plaintext) {
    std::cerr << tool << ": warning: the control API serves without TLS (scdino.control.plaintext: true): the "
              << "token travels in clear and anyone on the network path can read and reuse it\n";
  } else {
    auto id = config.scdino.control.tls_cert_file.empty()
                  ? control::MakeSelfSignedIdentity(p.run_dir + "/tls", options.service,
                                                    options.service + ".scdino.invalid", host)
                  : control::DescribeIdentity(config.scdino.control.tls_cert_file,
                                              config.scdino.control.tls_key_file);
    if (!id.ok()) return id.status();
    tls = *id;
  }
  control::ServerOptions so;
  so.listen_address = config.scdino.control.listen;
  so.token = *token;
  so.token_file = config.token_path();
  so.tls_cert_file = tls.cert_file;
  so.tls_key_file = tls.key_file;
  so.service = options.service;
  so.run_id = config.run_name();
  so.run_dir = p.run_dir;
  so.slurm_job_id = job;
  so.slurm_step_id = Env("SLURM_STEP_ID");
  so.host = host;
  so.world_size = launch.world_size;
  so.start_unix_ms = UnixMs();
  if (p.exporter) {
    auto* refused = &p.exporter->unauthenticated();
    so.on_unauthenticated = [refused] { refused->Increment(); };
  }
  auto server = control::ControlServer::Start(so, &control_);
  if (!server.ok()) return server.status();
  p.server = std::move(server).value();
  control::Endpoint ep;
  ep.service = options.service;
  ep.host = ReachableHost(so.listen_address.substr(0, so.listen_address.rfind(':')), host);
  ep.port = p.server->port();
  ep.pid = ::getpid();
  ep.slurm_job_id = so.slurm_job_id;
  ep.slurm_step_id = so.slurm_step_id;
  ep.start_unix_ms = so.start_unix_ms;
  ep.tls = p.server->tls();
  if (ep.tls) {
    ep.tls_cert = std::filesystem::absolute(tls.cert_file).string();
    ep.tls_fingerprint = tls.fingerprint;
    ep.tls_name = tls.name;
  }
  control::RecordThisProcess(&ep);
  ep.run_dir = p.run_dir;
  // A new life: the end record of the last one no longer holds.
  control::RemoveEnded(p.run_dir, options.service);
  if (auto s = control::WriteEndpoint(p.run_dir, ep, *token); !s.ok()) return s;
  std::cerr << tool << ": control API on " << ep.target()
            << (ep.tls ? " (TLS, certificate " + ep.tls_fingerprint + ")" : " (plaintext)") << ", endpoint "
            << control::EndpointPath(p.run_dir, options.service) << "\n";
  return Status::Ok();
}
#endif

void ServicePlane::ReportStage(const StageProgress& p) {
  control_.Update([&](RunStatus& s) {
    s.stage = p.stage;
    s.stage_unit = p.unit;
    s.stage_done = p.done;
    s.stage_total = p.total;
    s.stage_per_second = p.per_second;
    s.stage_eta_seconds = p.eta_seconds;
    s.stage_finished = p.finished;
  });
#ifdef SCDINO_WITH_SERVICES
  if (parts_->stages) parts_->stages->Set(p.stage, p.done, p.total, p.eta_seconds, p.finished);
#endif
}

prometheus::Registry* ServicePlane::registry() {
#ifdef SCDINO_WITH_SERVICES
  if (parts_ && parts_->exporter) return &parts_->exporter->registry();
#endif
  return nullptr;
}

void ServicePlane::ReportProgress(int64_t done, int64_t total) {
  // A count below the last one after the end is a new round (scdino-features:
  // the next checkpoint's images): its rate starts anew.
  double rate = 0.0;
  if (progress_) {
    progress_->Report(done, total);
    rate = progress_->rate();
  }
  control_.Update([&](RunStatus& s) {
    if (s.state == RunState::kStarting) s.state = RunState::kRunning;
    s.items_done = done;
    s.items_total = total;
    s.items_per_second = rate;
    s.eta_seconds = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  });
#ifdef SCDINO_WITH_SERVICES
  if (parts_->progress) parts_->progress->Set(done, total);
#endif
}

void ServicePlane::Finish(RunState final_state, const std::string& error, int exit_code) {
  if (!parts_) return;
  if (!IsFinal(control_.Snapshot().state)) {
    control_.Update([&](RunStatus& s) {
      s.state = final_state;
      s.error = error;
    });
  }
#ifdef SCDINO_WITH_SERVICES
  if (parts_->server) {
    // Watchers get the final state (their streams end on it), and health
    // watchers NOT_SERVING, before the server goes.
    parts_->server->StopServing();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    parts_->server->Shutdown();
    parts_->server.reset();
    const RunStatus last = control_.Snapshot();
    control::ServiceEnded ended;
    ended.service = parts_->service;
    ended.state = RunStateName(last.state);
    ended.error = last.error;
    ended.end_unix_ms = UnixMs();
    ended.host = parts_->host;
    ended.slurm_job_id = parts_->slurm_job_id;
    ended.pid = ::getpid();
    ended.exit_code = exit_code;
    for (const auto& code : ExitCodeTable()) {
      if (code.code != exit_code) continue;
      ended.requeue = code.requeue == Requeue::kAlways           ? "always"
                      : code.requeue == Requeue::kAfterJobSignal ? "after a job-wide signal"
                                                                 : "never";
    }
    if (auto s = control::WriteEnded(parts_->run_dir, ended); !s.ok()) {
      std::cerr << "scdino-" << parts_->service << ": " << s.message() << "\n";
    }
    control::RemoveEndpoint(parts_->run_dir, parts_->service);
  }
  // No linger after a stop signal (the node is being taken back), and a
  // stop signal during it ends it: scancel does not wait out the linger.
  if (parts_->exporter && parts_->linger_seconds > 0 && !StopSignalReceived()) {
    std::cerr << "scdino-" << parts_->service << ": metrics stay up " << parts_->linger_seconds
              << " s for the last scrape (scdino.metrics.linger_seconds; a stop signal ends it)\n";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(parts_->linger_seconds);
    while (!StopSignalReceived() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
#endif
}

void ServicePlane::Keep(std::shared_ptr<void> part) {
#ifdef SCDINO_WITH_SERVICES
  parts_->kept.push_back(std::move(part));
#else
  (void)part;
#endif
}

ServicePlane::~ServicePlane() {
  if (stage_target_) {
    SetStageSink({});
    std::lock_guard<std::mutex> lock(stage_target_->mu);
    stage_target_->plane = nullptr;
  }
  if (!parts_) return;
  if (!IsFinal(control_.Snapshot().state)) Finish(RunState::kFailed, "the process ended early");
#ifdef SCDINO_WITH_SERVICES
  parts_->server.reset();  // Finish stopped it; here only when Finish never ran
  if (parts_->status_watcher.joinable()) {
    parts_->stopping.store(true);
    parts_->status_watcher.join();
  }
  parts_->kept.clear();
  parts_->status.reset();
  parts_->stages.reset();
  parts_->progress.reset();
  parts_->exporter.reset();
#endif
}

int Fail(ServicePlane* plane, const std::string& program, const Status& s) {
  std::cerr << program << ": " << s.message() << "\n";
  // Aborted is also what a failed collective says: a stop only when one
  // was asked for.
  const bool asked = StopSignalReceived() || (plane && plane->control().Requests().stop);
  if (s.code() == StatusCode::kAborted && asked) {
    const int code = StopSignalReceived() ? kExitPreempted : kExitStoppedByApi;
    if (plane) plane->Finish(RunState::kStopped, "", code);
    return code;
  }
  if (plane) plane->Finish(RunState::kFailed, s.ToString(), ExitCodeFor(s));
  return ExitCodeFor(s);
}

int GuardMain(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    std::cerr << program << ": " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
  }
  return kExitFailed;
}

}  // namespace scdino::process
