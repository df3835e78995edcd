#include "trainer/trainer_rank.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "common/env.h"
#include "common/files.h"
#include "launch/environment.h"
#include "model/cpu_gemm.h"
#include "process/exit_codes.h"
#include "process/signals.h"
#include "trainer/resolve_plan.h"
#include "trainer/trainer_wiring.h"
#include "trainer/training_data.h"

namespace scdino::trainer {
namespace {

using process::ServicePlane;

int Fail(ServicePlane* plane, const Status& s) { return process::Fail(plane, "scdino-trainer", s); }

// Each rank's first line: where it computes, and why.
void SayWhere(const run::RunConfig& config, const run::LaunchInfo& launch, const run::DeviceChoice& device,
              bool bf16_supported, int threads) {
  std::cerr << "scdino-trainer: rank " << launch.rank << " of " << launch.world_size << ": device " << device.device
            << " (" << device.why << "), precision "
            << model::PrecisionName(config.precision(device.device, bf16_supported)) << "; run " << config.run_dir()
            << ", " << threads << " CPU threads, matrix products on " << model::CpuGemmDescription();
  if (device.device.is_cpu()) std::cerr << ", " << run::KeepFreedMemoryForCpuTraining();
  std::cerr << "\n";
}

// The process group over the rendezvous' store (Gloo on CPUs, NCCL on
// GPUs), said on each rank's line; a lost peer ends the process with 9.
StatusOr<std::shared_ptr<training::Collective>> ConnectGroup(const run::RunConfig& config,
                                                             const run::LaunchInfo& launch,
                                                             run::Coordinator& coordinator, torch::Device device) {
  training::DistributedOptions dist;
  dist.timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
  dist.bucket_bytes = config.scdino.bucket_mb << 20;
  dist.on_lost_peer = process::ExitForLostPeer;
  auto c = training::Collective::Connect(coordinator.store(), launch.rank, launch.world_size, dist, device);
  if (!c.ok()) return c.status();
  std::cerr << "scdino-trainer: rank " << launch.rank << " of " << launch.world_size << ", " << (*c)->backend() << " ("
            << launch.source << " launch, rendezvous " << launch.master_addr << ":" << coordinator.port() << ")\n";
  return c;
}

// The ranks met: the rendezvous, every rank's host, and a process group for
// several processes, or for one when torchrun-style variables ask for it
// (scripts/gpu-check.sh runs NCCL at world size 1).
Status Meet(const run::RunConfig& config, const run::LaunchInfo& launch, torch::Device device,
            training::TrainerOptions& options, TrainerParts& parts) {
  const auto timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
  auto coordinator = run::Rendezvous(config, launch, timeout, process::StopSignalReceived);
  if (!coordinator.ok()) return coordinator.status();
  parts.coordinator = *coordinator;
  options.coordinator = parts.coordinator;
  // Every rank knows every rank's node: a rank left alone names the one it lost.
  if (auto s = parts.coordinator->ExchangeHosts(ThisHostName()); !s.ok()) return s;
  if (launch.world_size > 1 || launch.source == "torchrun") {
    auto c = ConnectGroup(config, launch, *parts.coordinator, device);
    if (!c.ok()) return c.status();
    parts.collective = *c;
    options.collective = parts.collective;
    options.bucket_bytes = config.scdino.bucket_mb << 20;
  }
  return Status::Ok();
}

// The run's last lines and its exit code: done (7 when it did not learn
// and scdino.learning_check is require), or stopped (3, 4 or 75).
int ExitCodeOf(const training::TrainResult& result, bool require_learning) {
  using training::StopReason;
  switch (result.stopped_by) {
    case StopReason::kNone: {
      std::cerr << "scdino-trainer: done, " << result.iteration << " iterations; checkpoint " << result.checkpoint;
      if (result.recoveries > 0) std::cerr << "; recovered from a collapse " << result.recoveries << " time(s)";
      std::cerr << "\n";
      if (const auto& l = result.learning) {
        // One line, whatever the verdict (run/learning_verdict.h).
        const auto v = l->verdict();
        std::cerr << "scdino-trainer: " << v.line;
        if (v.learned == Learned::kNo) {
          std::cerr << ". docs/training.md says what to change (scdino.recipe: auto, scdino.on_collapse: recover)"
                    << (require_learning ? "; exit 7 (scdino.learning_check: require)" : "");
        }
        std::cerr << "\n";
        if (v.learned == Learned::kNo && require_learning) return process::kExitDidNotLearn;
      }
      return process::kExitCompleted;
    }
    case StopReason::kIterationLimit:
    case StopReason::kApi:
    case StopReason::kSignal:
      std::cerr << "scdino-trainer: stopped after iteration " << result.iteration << "; checkpoint "
                << result.checkpoint << " (run again to resume)\n";
      return result.stopped_by == StopReason::kSignal ? process::kExitPreempted
             : result.stopped_by == StopReason::kApi  ? process::kExitStoppedByApi
                                                       : process::kExitStopped;
  }
  return process::kExitFailed;
}

// The ranks met, the plane started: the data indexed once (the run's plan:
// the recipe, an elastic resume's batch), the source, the learning check,
// the loop's plan, the run.
int Train(const run::RunConfig& config, const run::DeviceChoice& device, bool bf16_supported,
          const std::vector<run::RecipeValue>& resume, training::TrainerOptions options, TrainerParts& parts) {
  ServicePlane* plane = parts.plane.get();
  process::AttachTrainer(*plane, &options, device.device);
  // The statistics of a large data set take minutes: a stop ends them.
  const bool resuming = options.resume && FileExists(config.run_dir() + "/checkpoint.safetensors");
  auto data = PrepareTrainingData(config, *parts.coordinator, device.device, resuming, resume, &std::cerr, [plane] {
    return process::StopSignalReceived() || plane->control().Requests().stop;
  });
  if (!data.ok()) return Fail(plane, data.status());
  const run::RunConfig& settings = data->plan.settings;
  if (data->check) {
    parts.check = std::move(data->check);
    options.learning_check = [raw = parts.check.get()](model::VisionTransformer teacher, int64_t epoch,
                                                       int64_t it) { return raw->Measure(teacher, epoch, it); };
  } else if (!data->no_check.empty()) {
    std::cerr << "scdino-trainer: no learning check: " << data->no_check << "\n";
  }
  // The options' copies of the shared parts go with the trainer; the
  // shutdown holds the others.
  parts.trainer = std::make_unique<training::Trainer>(TrainPlanOf(settings, device.device, bf16_supported),
                                                      std::move(data->source), std::move(options));
  // Signals stop reaching the trainer before the shutdown destroys it,
  // also when an exception unwinds this scope.
  process::ScopedStopFlag route_signals(parts.trainer->stop_flag());
  auto result = parts.trainer->Run();
  if (!result.ok()) return Fail(plane, result.status());
  // Every rank's part of the stop is saved (rank 0 wrote the checkpoint,
  // the others waited for its outcome): a later signal cannot change the
  // exit code any more.
  if (result->stopped_by == training::StopReason::kSignal) process::MarkStopSaved();
  const int code = ExitCodeOf(*result, settings.scdino.learning_check == "require");
  plane->Finish(result->completed ? RunState::kCompleted : RunState::kStopped, "", code);
  return code;
}

}  // namespace

std::vector<process::ShutdownStage> TrainerParts::Stages() {
  return {{"the trainer and its data loader", [this] { trainer.reset(); }},
          {"the learning check", [this] { check.reset(); }},
          {"the control API and metrics", [this] { plane.reset(); }},
          {"the process group", [this] { collective.reset(); }},
          {"the rendezvous store", [this] { coordinator.reset(); }}};
}

int RunTrainerRank(const run::RunConfig& config, training::TrainerOptions options, int threads, TrainerParts& parts) {
  auto launch = run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
  if (!launch.ok()) return Fail(nullptr, launch.status());
  auto device = run::PickDevice(config, *launch);
  if (!device.ok()) return Fail(nullptr, device.status());
  const bool bf16_supported = run::DeviceSupportsBf16(device->device);
  SayWhere(config, *launch, *device, bf16_supported, threads);
  auto run_dir_lock = run::PrepareRunDir(config, *launch, "trainer");
  if (!run_dir_lock.ok()) return Fail(nullptr, run_dir_lock.status());
  // What the checkpoint sets on another world size (an elastic resume's
  // batch): read by every rank, so that a world size it cannot take is
  // refused before the rendezvous; rank 0's read goes into the plan.
  std::vector<run::RecipeValue> resume;
  if (options.resume) {
    auto values = ElasticResume(config, launch->world_size);
    if (!values.ok()) return Fail(nullptr, values.status());
    resume = std::move(values).value();
  }
  if (auto s = Meet(config, *launch, device->device, options, parts); !s.ok()) return Fail(nullptr, s);
  auto started = ServicePlane::Start(config, *launch, {"trainer", "", ""});
  if (!started.ok()) return Fail(nullptr, started.status());
  parts.plane = std::move(started).value();
  return Train(config, *device, bf16_supported, resume, std::move(options), parts);
}

}  // namespace scdino::trainer
