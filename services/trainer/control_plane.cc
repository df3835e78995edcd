#include "trainer/control_plane.h"

#include "common/files.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#ifdef SCDINO_WITH_SERVICES
#include "control/endpoint.h"
#include "control/server.h"
#include "control/token.h"
#include "metrics/exporter.h"
#include "metrics/trainer_metrics.h"
#endif

namespace scdino::trainer {

#ifdef SCDINO_WITH_SERVICES
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace
#endif

struct ControlPlane::Parts {
#ifdef SCDINO_WITH_SERVICES
  std::unique_ptr<metrics::Exporter> exporter;
  std::unique_ptr<metrics::TrainerMetrics> trainer_metrics;
  std::unique_ptr<control::ControlServer> server;
#endif
  std::string run_dir;
};

StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(const training::TrainConfig& config,
                                                            const training::LaunchInfo& launch, torch::Device device,
                                                            training::TrainerOptions* options) {
  std::unique_ptr<ControlPlane> plane(new ControlPlane());
  plane->parts_ = std::make_unique<Parts>();
  plane->parts_->run_dir = std::filesystem::absolute(config.run_dir()).string();
#ifdef SCDINO_WITH_SERVICES
  Parts& p = *plane->parts_;
  const std::string host = HostName();
  const std::string job = Env("SLURM_JOB_ID");
  if (config.scdino.metrics.enabled) {
    metrics::ExporterOptions mo;
    mo.listen_address = config.scdino.metrics.listen;
    mo.port = config.scdino.metrics.port > 0 ? static_cast<int>(config.scdino.metrics.port + launch.local_rank) : 0;
    mo.file_sd_dir = config.file_sd_dir();
    mo.service = "trainer";
    mo.run = config.meta.name_of_run;
    mo.job = job;
    mo.node = host;
    mo.rank = launch.rank;
    auto e = metrics::Exporter::Start(mo);
    if (!e.ok()) return e.status();
    p.exporter = std::move(e).value();
    p.trainer_metrics = std::make_unique<metrics::TrainerMetrics>(p.exporter->registry(), device);
    auto* m = p.trainer_metrics.get();
    options->on_step = [m](const training::StepReport& r) { m->OnStep(r); };
    options->on_checkpoint = [m](const training::CheckpointReport& r) { m->OnCheckpoint(r); };
    std::cerr << "scdino-trainer: rank " << launch.rank << " metrics on http://" << host << ":" << p.exporter->port()
              << "/metrics" << (p.exporter->file_sd_path().empty() ? "" : ", target file " + p.exporter->file_sd_path())
              << "\n";
  }
  if (config.scdino.control.enabled && launch.rank == 0) {
    if (auto s = MakeDirs(p.run_dir); !s.ok()) return s;
    const std::string token_path = config.token_path();
    auto token = control::LoadOrCreateToken(token_path);
    if (!token.ok()) return token.status();
    control::ServerOptions so;
    so.listen_address = config.scdino.control.listen;
    so.token = *token;
    so.tls_cert_file = config.scdino.control.tls_cert_file;
    so.tls_key_file = config.scdino.control.tls_key_file;
    so.service = "trainer";
    so.run_id = config.meta.name_of_run;
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
    auto server = control::ControlServer::Start(so, &plane->control_);
    if (!server.ok()) return server.status();
    p.server = std::move(server).value();
    control::Endpoint ep;
    ep.service = "trainer";
    // A specific listen address is what callers must use; else the host name.
    const std::string listen_host = so.listen_address.substr(0, so.listen_address.rfind(':'));
    ep.host = (listen_host == "0.0.0.0" || listen_host == "[::]" || listen_host.empty()) ? host : listen_host;
    ep.port = p.server->port();
    ep.pid = ::getpid();
    ep.slurm_job_id = so.slurm_job_id;
    ep.slurm_step_id = so.slurm_step_id;
    ep.start_unix_ms = so.start_unix_ms;
    ep.tls = p.server->tls();
    ep.token_file = std::filesystem::absolute(token_path).string();
    if (auto s = control::WriteEndpoint(p.run_dir, ep); !s.ok()) return s;
    options->control = &plane->control_;
    std::cerr << "scdino-trainer: control API on " << ep.target() << " (endpoint "
              << control::EndpointPath(p.run_dir, "trainer") << ")\n";
  }
#else
  (void)config;
  (void)launch;
  (void)device;
  (void)options;
  std::cerr << "scdino-trainer: built without the service layer: no control API, no metrics\n";
#endif
  return plane;
}

void ControlPlane::Finish() {
#ifdef SCDINO_WITH_SERVICES
  if (parts_ && parts_->server) {
    // Watchers get the final state (their streams end on it) before the
    // server goes.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    parts_->server->Shutdown();
    parts_->server.reset();
    control::RemoveEndpoint(parts_->run_dir, "trainer");
  }
#endif
}

ControlPlane::~ControlPlane() { Finish(); }

}  // namespace scdino::trainer
