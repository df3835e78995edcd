// scdino-trainer: DINO pretraining from a YAML config. Wiring only: flags,
// config, launch, rendezvous, data source, Trainer::Run, exit code, and the
// ordered shutdown (see docs/trainer.md).

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>

#include "common/env.h"
#include "common/files.h"
#include "model/cpu_gemm.h"
#include "launch/coordinator.h"
#include "launch/environment.h"
#include "plan/source.h"
#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/shutdown.h"
#include "process/signals.h"
#include "trainer/learning_check.h"
#include "trainer/trainer_wiring.h"
#include "trainer/training_data.h"
#include "training/trainer.h"

namespace {

using namespace scdino::process;  // the exit codes, CommandLine

int Fail(ServicePlane* plane, const scdino::Status& s) { return scdino::process::Fail(plane, "scdino-trainer", s); }

// Every part of the process that runs threads, held here rather than on
// the stack of the work so that the shutdown stops them in a fixed order
// however the work ended (done, stopped, failed, an exception).
struct Parts {
  std::shared_ptr<scdino::run::Coordinator> coordinator;      // rank 0: the store's server thread
  std::shared_ptr<scdino::training::Collective> collective;   // Gloo's or NCCL's threads
  std::unique_ptr<ServicePlane> plane;                        // gRPC, the exporter, the state watcher
  std::shared_ptr<scdino::trainer::LearningCheck> check;
  std::unique_ptr<scdino::training::Trainer> trainer;         // the data loader's threads

  // Each part after what uses it: the trainer (and its loader) first, the
  // store last, since other ranks' groups may still speak to it until theirs end.
  std::vector<ShutdownStage> Stages() {
    return {{"the trainer and its data loader", [this] { trainer.reset(); }},
            {"the learning check", [this] { check.reset(); }},
            {"the control API and metrics", [this] { plane.reset(); }},
            {"the process group", [this] { collective.reset(); }},
            {"the rendezvous store", [this] { coordinator.reset(); }}};
  }
};

// Each rank's first line: where it computes, and why.
void SayWhere(const scdino::run::RunConfig& config, const scdino::run::LaunchInfo& launch, torch::Device device,
              const std::string& why, bool bf16_supported, int threads) {
  std::cerr << "scdino-trainer: rank " << launch.rank << " of " << launch.world_size << ": device " << device << " ("
            << why << "), precision " << scdino::model::PrecisionName(config.precision(device, bf16_supported))
            << "; run " << config.run_dir() << ", " << threads << " CPU threads, matrix products on "
            << scdino::model::CpuGemmDescription();
  if (device.is_cpu()) std::cerr << ", " << scdino::run::KeepFreedMemoryForCpuTraining();
  std::cerr << "\n";
}

// The process group over the rendezvous' store (Gloo on CPUs, NCCL on
// GPUs), said on each rank's line; a lost peer ends the process with 9.
scdino::StatusOr<std::shared_ptr<scdino::training::Collective>> ConnectGroup(const scdino::run::RunConfig& config,
                                                                             const scdino::run::LaunchInfo& launch,
                                                                             scdino::run::Coordinator& coordinator,
                                                                             torch::Device device) {
  scdino::training::DistributedOptions dist;
  dist.timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
  dist.bucket_bytes = config.scdino.bucket_mb << 20;
  dist.on_lost_peer = scdino::process::ExitForLostPeer;
  auto c = scdino::training::Collective::Connect(coordinator.store(), launch.rank, launch.world_size, dist, device);
  if (!c.ok()) return c.status();
  std::cerr << "scdino-trainer: rank " << launch.rank << " of " << launch.world_size << ", " << (*c)->backend() << " ("
            << launch.source << " launch, rendezvous " << launch.master_addr << ":" << coordinator.port() << ")\n";
  return c;
}

// The run's last lines and its exit code: done (7 when it did not learn
// and scdino.learning_check is require), or stopped (3, 4 or 75).
int ExitCodeOf(const scdino::training::TrainResult& result, bool require_learning) {
  using scdino::training::StopReason;
  switch (result.stopped_by) {
    case StopReason::kNone: {
      std::cerr << "scdino-trainer: done, " << result.iteration << " iterations; checkpoint " << result.checkpoint;
      if (result.recoveries > 0) std::cerr << "; recovered from a collapse " << result.recoveries << " time(s)";
      std::cerr << "\n";
      if (const auto& l = result.learning) {
        // One line, whatever the verdict (run/learning_verdict.h).
        const auto v = l->verdict();
        std::cerr << "scdino-trainer: " << v.line;
        if (v.learned == scdino::Learned::kNo) {
          std::cerr << ". docs/training.md says what to change (scdino.recipe: auto, scdino.on_collapse: recover)"
                    << (require_learning ? "; exit 7 (scdino.learning_check: require)" : "");
        }
        std::cerr << "\n";
        if (v.learned == scdino::Learned::kNo && require_learning) return kExitDidNotLearn;
      }
      return kExitCompleted;
    }
    case StopReason::kIterationLimit:
    case StopReason::kApi:
    case StopReason::kSignal:
      std::cerr << "scdino-trainer: stopped after iteration " << result.iteration << "; checkpoint "
                << result.checkpoint << " (run again to resume)\n";
      return result.stopped_by == StopReason::kSignal ? kExitPreempted
             : result.stopped_by == StopReason::kApi  ? kExitStoppedByApi
                                                       : kExitStopped;
  }
  return kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-trainer", "finishing the current step, then checkpointing");
  scdino::training::TrainerOptions options;
  options.log = &std::cout;
  options.progress = &std::cerr;
  bool no_resume = false;
  CommandLine cl("scdino-trainer",
                 "DINO pretraining of a ViT on multi-channel cell images (docs/trainer.md).\n" +
                     ExitCodesHelp("scdino-trainer"));
  cl.app().add_option("--stop-after-iterations", options.stop_after_iterations,
                      "checkpoint and exit (code 3) once this many iterations are done in total; -1: run to the end")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  cl.app().add_flag("--no-resume", no_resume, "ignore an existing checkpoint in the run directory");
  if (auto code = cl.Parse(argc, argv)) return *code;
  options.resume = !no_resume;
  Parts parts;
  const auto& config = cl.config();
  const int threads = cl.ConfigureCpu();
  const int code = GuardMain("scdino-trainer", [&]() -> int {
    auto launch = scdino::run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) return Fail(nullptr, launch.status());
    auto device = scdino::run::PickDevice(config, *launch);
    if (!device.ok()) return Fail(nullptr, device.status());
    options.device = device->device;
    options.bf16_supported = scdino::run::DeviceSupportsBf16(device->device);
    SayWhere(config, *launch, device->device, device->why, options.bf16_supported, threads);
    auto run_dir_lock = scdino::run::PrepareRunDir(config, *launch, "trainer");
    if (!run_dir_lock.ok()) return Fail(nullptr, run_dir_lock.status());
    // What the checkpoint sets on another world size (an elastic resume's
    // batch): read by every rank, so that a world size it cannot take is
    // refused before the rendezvous; rank 0's read goes into the plan.
    std::vector<scdino::run::RecipeValue> resume;
    if (options.resume) {
      auto values = scdino::trainer::ElasticResume(config, launch->world_size);
      if (!values.ok()) return Fail(nullptr, values.status());
      resume = std::move(values).value();
    }
    const auto timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
    auto coordinator = scdino::run::Rendezvous(config, *launch, timeout, StopSignalReceived);
    if (!coordinator.ok()) return Fail(nullptr, coordinator.status());
    parts.coordinator = *coordinator;
    options.coordinator = parts.coordinator;
    // Every rank knows every rank's node: a rank left alone names the one it lost.
    if (auto s = parts.coordinator->ExchangeHosts(scdino::ThisHostName()); !s.ok()) return Fail(nullptr, s);
    // A process group for several processes, or for one when torchrun-style
    // variables ask for it (scripts/gpu-check.sh runs NCCL at world size 1).
    if (launch->world_size > 1 || launch->source == "torchrun") {
      auto c = ConnectGroup(config, *launch, *parts.coordinator, device->device);
      if (!c.ok()) return Fail(nullptr, c.status());
      parts.collective = *c;
      options.collective = parts.collective;
      options.bucket_bytes = config.scdino.bucket_mb << 20;
    }
    auto started = ServicePlane::Start(config, *launch, {"trainer", "", ""});
    if (!started.ok()) return Fail(nullptr, started.status());
    parts.plane = std::move(started).value();
    ServicePlane* plane = parts.plane.get();
    AttachTrainer(*plane, &options, device->device);
    // The data, indexed once: the run's plan (the recipe, an elastic
    // resume's batch), the source and the learning check. The statistics of
    // a large data set take minutes: a stop ends them.
    const bool resuming = options.resume && scdino::FileExists(config.run_dir() + "/checkpoint.safetensors");
    auto data = scdino::trainer::PrepareTrainingData(
        config, *parts.coordinator, device->device, resuming, resume, &std::cerr,
        [plane] { return StopSignalReceived() || plane->control().Requests().stop; });
    if (!data.ok()) return Fail(plane, data.status());
    const bool require_learning = data->plan.settings.scdino.learning_check == "require";
    if (data->check) {
      parts.check = std::move(data->check);
      options.learning_check = [raw = parts.check.get()](scdino::model::VisionTransformer teacher, int64_t epoch,
                                                         int64_t it) { return raw->Measure(teacher, epoch, it); };
    } else if (!data->no_check.empty()) {
      std::cerr << "scdino-trainer: no learning check: " << data->no_check << "\n";
    }
    // The options' copies of the shared parts go with the trainer; the
    // shutdown holds the others.
    parts.trainer = std::make_unique<scdino::training::Trainer>(std::move(data->plan.settings), std::move(data->source),
                                                               std::exchange(options, {}));
    // Signals stop reaching the trainer before the shutdown destroys it,
    // also when an exception unwinds this scope.
    ScopedStopFlag route_signals(parts.trainer->stop_flag());
    auto result = parts.trainer->Run();
    if (!result.ok()) return Fail(plane, result.status());
    // Every rank's part of the stop is saved (rank 0 wrote the checkpoint,
    // the others waited for its outcome): a later signal cannot change the
    // exit code any more.
    if (result->stopped_by == scdino::training::StopReason::kSignal) MarkStopSaved();
    plane->Finish(result->completed ? scdino::RunState::kCompleted : scdino::RunState::kStopped);
    return ExitCodeOf(*result, require_learning);
  });
  EndProcess("scdino-trainer", code, parts.Stages(), kShutdownBound);
}
