// The start-up every service main shares, written once (scdino-features,
// scdino-eval, scdino-preflight): where this process runs (the launch), its
// device, its run directory, the other ranks (the rendezvous) and its
// service plane (control API and metrics); then the service's own work in
// GuardMain's scope, and the ordered end (process/shutdown.h). A main
// declares its flags, reads its settings and hands its work to RunService.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "launch/environment.h"
#include "launch/launch.h"
#include "process/checkpoint_follower.h"
#include "process/service_plane.h"

namespace scdino::process {

struct ServiceSpec {
  std::string program;  ///< "scdino-features": every message starts with it
  /// One process whatever the environment says (scdino-eval): no launch
  /// read, no rendezvous.
  bool alone = false;
  /// Refuses a launch before anything is started (features --follow needs
  /// one process): an error, said as the others are.
  std::function<Status(const run::LaunchInfo&)> check_launch;
  /// The control API and metrics; nullopt: none (the preflight).
  std::optional<ServiceOptions> plane;
};

/// What RunService started, for the service's work.
struct Service {
  std::string program;
  run::LaunchInfo launch;
  run::DeviceChoice device;
  /// The ranks met when the launch has several; Coordinator::Single for
  /// one process, which meets no one (no store on MASTER_PORT, which
  /// Enroot's PyTorch hook sets per job: a follower beside the trainer's
  /// rank 0 would otherwise try to bind the trainer's port).
  std::shared_ptr<run::Coordinator> coordinator;
  std::unique_ptr<ServicePlane> plane;  ///< null without ServiceSpec::plane
  int threads = 1;

  /// A stop signal, or scdinoctl stop through the plane.
  bool Stopping() const;
  /// process::Fail with this service's plane and program: the exit code.
  int Fail(const Status& s) const;
};

/// A --follow of the run's trainer (scdino-features, scdino-eval): its run
/// directory and token file from `config`, messages on stderr as `program`.
FollowOptions FollowOptionsFor(const run::RunConfig& config, const std::string& program,
                               std::function<bool()> should_stop);

/// The start-up (launch, device, the start line, the run directory, the
/// rendezvous, the plane), then `work`; ends the process with its exit
/// code, or with Fail's for a start-up that failed.
[[noreturn]] void RunService(const ServiceSpec& spec, const run::RunConfig& config, int threads,
                             const std::function<int(Service&)>& work);

}  // namespace scdino::process
