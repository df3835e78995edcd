// scdino-trainer: DINO pretraining from a YAML config. Wiring only: flags,
// config, data source, Trainer::Run, exit code (see docs/trainer.md).

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "runtime/command_line.h"
#include "runtime/service_plane.h"
#include "training/config.h"
#include "training/trainer.h"

namespace {

using namespace scdino::runtime;  // the exit codes, CommandLine

std::atomic<scdino::training::Trainer*> g_trainer{nullptr};

// A stop signal asks the trainer to finish its step, checkpoint and return.
void StopTrainer() {
  if (auto* t = g_trainer.load()) t->RequestStop();
}

const char kUsage[] =
    "usage: scdino-trainer --config FILE [--threads N] [--stop-after-iterations K] [--no-resume]\n"
    "  --config FILE               YAML config (scDINO's scDINO_full_pipeline.yaml keys, plus section scdino)\n"
    "  --threads N                 intra-op CPU threads (overrides scdino.threads; 0 = all cores)\n"
    "  --stop-after-iterations K   checkpoint and exit (code 3) once K iterations are done in total\n"
    "  --no-resume                 ignore an existing checkpoint in the run directory\n"
    "exit codes: 0 completed, 1 failed, 2 bad input, 3 stopped by --stop-after-iterations,\n"
    "            4 stopped through the control API (scdinoctl stop) after a checkpoint,\n"
    "            75 stopped by SIGTERM/SIGUSR1/SIGINT after a checkpoint (requeue to resume)\n";

}  // namespace

int main(int argc, char** argv) {
  InstallStopSignals("scdino-trainer", "finishing the current step, then checkpointing", StopTrainer);
  scdino::training::TrainerOptions options;
  options.log = &std::cout;
  CommandLine cl("scdino-trainer", kUsage);
  cl.Count("--stop-after-iterations", &options.stop_after_iterations).Switch("--no-resume", [&] {
    options.resume = false;
  });
  if (auto code = cl.Parse(argc, argv, std::cout, std::cerr)) return *code;
  auto& config = cl.config();
  const int n = cl.ConfigureThreads();
  std::cerr << "scdino-trainer: run " << config.run_dir() << ", " << n << " CPU threads\n";
  try {
    auto launch = scdino::training::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) {
      std::cerr << "scdino-trainer: " << launch.status().message() << "\n";
      return kExitBadInput;
    }
    auto picked = cl.Device(launch->local_rank);
    if (!picked.ok()) {
      std::cerr << "scdino-trainer: " << picked.status().message() << "\n";
      return kExitBadInput;
    }
    const torch::Device device = *picked;
    options.device = device;
    std::cerr << "scdino-trainer: device " << device << ", precision "
              << scdino::model::PrecisionName(config.precision()) << "\n";
    // A process group for several processes, or for one when torchrun-style
    // variables ask for it (scripts/gpu-check.sh runs NCCL at world size 1).
    if (launch->world_size > 1 || launch->source == "torchrun") {
      scdino::training::DistributedOptions dist;
      dist.timeout = std::chrono::seconds(config.scdino.distributed_timeout_s);
      dist.bucket_bytes = config.scdino.bucket_mb << 20;
      options.bucket_bytes = dist.bucket_bytes;
      auto c = scdino::training::Collective::Connect(*launch, dist, device);
      if (!c.ok()) {
        std::cerr << "scdino-trainer: " << c.status().message() << "\n";
        return kExitFailed;
      }
      options.collective = *c;
      std::cerr << "scdino-trainer: rank " << launch->rank << " of " << launch->world_size << ", "
                << options.collective->backend() << " (" << launch->source << " launch, rendezvous "
                << launch->master_addr << ":" << launch->master_port << ")\n";
    }
    auto plane = ServicePlane::Start(config, *launch, {"trainer", ""});
    if (!plane.ok()) {
      std::cerr << "scdino-trainer: " << plane.status().ToString() << "\n";
      return kExitFailed;
    }
    (*plane)->AttachTrainer(&options, device);
    auto& control = (*plane)->control();
    auto source = scdino::training::MakeSource(config, launch->rank, launch->world_size, device);
    if (!source.ok()) {
      std::cerr << "scdino-trainer: " << source.status().message() << "\n";
      (*plane)->Finish(scdino::RunState::kFailed, source.status().ToString());
      return kExitBadInput;
    }
    scdino::training::Trainer trainer(std::move(config), std::move(source).value(), options);
    g_trainer.store(&trainer);
    if (StopSignalReceived()) trainer.RequestStop();  // a signal that came during set-up
    auto result = trainer.Run();
    g_trainer.store(nullptr);
    (*plane)->Finish(result.ok() ? scdino::RunState::kCompleted : scdino::RunState::kFailed,
                     result.ok() ? "" : result.status().ToString());
    if (!result.ok()) {
      std::cerr << "scdino-trainer: " << result.status().ToString() << "\n";
      return kExitFailed;
    }
    if (!result->completed) {
      std::cerr << "scdino-trainer: stopped after iteration " << result->iteration << "; checkpoint "
                << result->checkpoint << " (run again to resume)\n";
      if (StopSignalReceived()) return kExitPreempted;
      return control.Requests().stop ? kExitStoppedByApi : kExitStopped;
    }
    std::cerr << "scdino-trainer: done, " << result->iteration << " iterations; checkpoint " << result->checkpoint
              << "\n";
    return kExitCompleted;
  } catch (const std::exception& e) {
    std::cerr << "scdino-trainer: " << e.what() << "\n";
    return kExitFailed;
  }
}
