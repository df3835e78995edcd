#include "process/service.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "process/shutdown.h"
#include "process/signals.h"

namespace scdino::process {

bool Service::Stopping() const { return StopSignalReceived() || (plane && plane->control().Requests().stop); }

int Service::Fail(const Status& s) const { return process::Fail(plane.get(), program, s); }

FollowOptions FollowOptionsFor(const run::RunConfig& config, const std::string& program,
                               std::function<bool()> should_stop) {
  FollowOptions fo;
  fo.run_dir = config.run_dir();
  fo.token_file = config.scdino.control.token_file;
  fo.should_stop = std::move(should_stop);
  fo.log = &std::cerr;
  fo.program = program;
  return fo;
}

namespace {

// Everything up to the work; an exit code when the start-up failed.
std::optional<int> Start(const ServiceSpec& spec, const run::RunConfig& config, Service& s) {
  if (!spec.alone) {
    auto launch = run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) return s.Fail(launch.status());
    s.launch = *launch;
  }
  if (spec.check_launch) {
    if (auto st = spec.check_launch(s.launch); !st.ok()) return s.Fail(st);
  }
  auto device = run::PickDevice(config, s.launch);
  if (!device.ok()) return s.Fail(device.status());
  s.device = *device;
  std::cerr << s.program << ": run " << config.run_dir() << ", rank " << s.launch.rank << " of "
            << s.launch.world_size << ", device " << s.device.device << " (" << s.device.why << "), " << s.threads
            << " CPU threads\n";
  // Temporaries of writers that were killed go; a live writer's stay.
  if (auto st = run::PrepareRunDir(config); !st.ok()) return s.Fail(st);
  s.coordinator = run::Coordinator::Single();
  if (s.launch.world_size > 1) {
    auto met = run::Rendezvous(config, s.launch, std::chrono::seconds(config.scdino.distributed_timeout_s),
                               StopSignalReceived);
    if (!met.ok()) return s.Fail(met.status());
    s.coordinator = *met;
  }
  if (spec.plane) {
    auto plane = ServicePlane::Start(config, s.launch, *spec.plane);
    if (!plane.ok()) return s.Fail(plane.status());
    s.plane = std::move(plane).value();
  }
  return std::nullopt;
}

}  // namespace

void RunService(const ServiceSpec& spec, const run::RunConfig& config, int threads,
                const std::function<int(Service&)>& work) {
  // Every part with threads lives in the work's scope and is stopped as it
  // ends (the control API and metrics, then the rendezvous); then the
  // process ends without library destructors (process/shutdown.h).
  const int code = GuardMain(spec.program, [&]() -> int {
    Service s;
    s.program = spec.program;
    s.threads = threads;
    if (auto failed = Start(spec, config, s)) return *failed;
    return work(s);
  });
  EndProcess(spec.program, code);
}

}  // namespace scdino::process
