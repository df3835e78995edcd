// scdino-trainer: DINO pretraining from a YAML config. Wiring only: flags,
// config, data source, Trainer::Run, exit code (see docs/trainer.md).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "runtime/service_plane.h"
#include "training/config.h"
#include "training/trainer.h"

namespace {

using namespace scdino::runtime;  // the exit codes

std::atomic<int> g_signal{0};
std::atomic<scdino::training::Trainer*> g_trainer{nullptr};

// SIGTERM, SIGUSR1 (Slurm's --signal=USR1@120) and SIGINT: the first asks the
// trainer to finish its step, checkpoint and return; a second one ends the
// process at once (checkpoint writes are atomic, so nothing written is lost).
// A handler rather than sigwait on a dedicated thread: OpenBLAS starts its
// threads when the library loads, before main could block signals for them.
// It only touches lock-free atomics and write(2), which are signal-safe.
void OnSignal(int sig) {
  static_assert(std::atomic<int>::is_always_lock_free && std::atomic<void*>::is_always_lock_free);
  if (g_signal.exchange(sig) != 0) {
    const char msg[] = "scdino-trainer: second signal, exiting now\n";
    (void)!::write(2, msg, sizeof msg - 1);
    std::_Exit(kExitFailed);
  }
  const char msg[] = "scdino-trainer: signal received: finishing the current step, then checkpointing\n";
  (void)!::write(2, msg, sizeof msg - 1);
  if (auto* t = g_trainer.load()) t->RequestStop();
}

void Usage(std::ostream& out) {
  out << "usage: scdino-trainer --config FILE [--threads N] [--stop-after-iterations K] [--no-resume]\n"
         "  --config FILE               YAML config (scDINO's scDINO_full_pipeline.yaml keys, plus section scdino)\n"
         "  --threads N                 intra-op CPU threads (overrides scdino.threads; 0 = all cores)\n"
         "  --stop-after-iterations K   checkpoint and exit (code 3) once K iterations are done in total\n"
         "  --no-resume                 ignore an existing checkpoint in the run directory\n"
         "exit codes: 0 completed, 1 failed, 2 bad input, 3 stopped by --stop-after-iterations,\n"
         "            4 stopped through the control API (scdinoctl stop) after a checkpoint,\n"
         "            75 stopped by SIGTERM/SIGUSR1/SIGINT after a checkpoint (requeue to resume)\n";
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);

  std::string config_path;
  int64_t threads = -1;
  scdino::training::TrainerOptions options;
  options.log = &std::cout;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::cerr << "scdino-trainer: " << flag << " needs a value\n";
        Usage(std::cerr);
        std::exit(kExitBadInput);
      }
      return argv[++i];
    };
    auto integer = [&](const char* flag) -> int64_t {
      const char* v = value(flag);
      char* end = nullptr;
      long long x = std::strtoll(v, &end, 10);
      if (*v == '\0' || *end != '\0' || x < 0) {
        std::cerr << "scdino-trainer: " << flag << " expects an integer >= 0, got '" << v << "'\n";
        std::exit(kExitBadInput);
      }
      return x;
    };
    if (a == "--config") {
      config_path = value("--config");
    } else if (a == "--threads") {
      threads = integer("--threads");
    } else if (a == "--stop-after-iterations") {
      options.stop_after_iterations = integer("--stop-after-iterations");
    } else if (a == "--no-resume") {
      options.resume = false;
    } else if (a == "-h" || a == "--help") {
      Usage(std::cout);
      return kExitCompleted;
    } else {
      std::cerr << "scdino-trainer: unknown argument '" << a << "'\n";
      Usage(std::cerr);
      return kExitBadInput;
    }
  }
  if (config_path.empty()) {
    std::cerr << "scdino-trainer: --config FILE is required\n";
    Usage(std::cerr);
    return kExitBadInput;
  }
  auto config = scdino::training::LoadTrainConfig(config_path);
  if (!config.ok()) {
    std::cerr << "scdino-trainer: " << config.status().message() << "\n";
    return kExitBadInput;
  }
  const int n = scdino::training::ConfigureThreads(threads >= 0 ? threads : config->scdino.threads);
  std::cerr << "scdino-trainer: run " << config->run_dir() << ", " << n << " CPU threads\n";
  try {
    auto launch = scdino::training::LaunchFromEnv([](const char* k) { return std::getenv(k); });
    if (!launch.ok()) {
      std::cerr << "scdino-trainer: " << launch.status().message() << "\n";
      return kExitBadInput;
    }
    torch::Device device = torch::kCPU;
    if (config->scdino.device == "cuda") {
      if (!torch::cuda::is_available()) {
        std::cerr << "scdino-trainer: " << config_path << ": scdino.device is cuda, but no CUDA device is available"
                  << " (or this build's LibTorch has no CUDA)\n";
        return kExitBadInput;
      }
      // One GPU per task: the local rank picks it.
      device = torch::Device(torch::kCUDA,
                             static_cast<c10::DeviceIndex>(launch->local_rank % torch::cuda::device_count()));
    }
    options.device = device;
    std::cerr << "scdino-trainer: device " << device << ", precision "
              << scdino::model::PrecisionName(config->precision()) << "\n";
    // A process group for several processes, or for one when torchrun-style
    // variables ask for it (scripts/gpu-check.sh runs NCCL at world size 1).
    if (launch->world_size > 1 || launch->source == "torchrun") {
      scdino::training::DistributedOptions dist;
      dist.timeout = std::chrono::seconds(config->scdino.distributed_timeout_s);
      dist.bucket_bytes = config->scdino.bucket_mb << 20;
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
    auto plane = ServicePlane::Start(*config, *launch, {"trainer", ""});
    if (!plane.ok()) {
      std::cerr << "scdino-trainer: " << plane.status().ToString() << "\n";
      return kExitFailed;
    }
    (*plane)->AttachTrainer(&options, device);
    auto& control = (*plane)->control();
    auto source = scdino::training::MakeSource(*config, launch->rank, launch->world_size, device);
    if (!source.ok()) {
      std::cerr << "scdino-trainer: " << source.status().message() << "\n";
      (*plane)->Finish(scdino::RunState::kFailed, source.status().ToString());
      return kExitBadInput;
    }
    scdino::training::Trainer trainer(std::move(*config), std::move(source).value(), options);
    g_trainer.store(&trainer);
    if (g_signal.load() != 0) trainer.RequestStop();  // a signal that came during set-up
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
      if (g_signal.load() != 0) return kExitPreempted;
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
