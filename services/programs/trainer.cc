// scdino-trainer: DINO pretraining from a YAML config. Wiring only: the
// command line, then one rank's run (trainer/trainer_rank.h) and the
// ordered shutdown (see docs/trainer.md).

#include <iostream>
#include <limits>
#include <utility>

#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/service_plane.h"
#include "process/shutdown.h"
#include "process/signals.h"
#include "trainer/trainer_rank.h"
#include "programs/mains.h"

namespace scdino::programs::trainer_main {

int Main(int argc, char** argv) {
  using namespace scdino::process;
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
  scdino::trainer::TrainerParts parts;
  const int threads = cl.ConfigureCpu();
  const int code = GuardMain("scdino-trainer", [&] {
    return scdino::trainer::RunTrainerRank(cl.config(), std::move(options), threads, parts);
  });
  EndProcess("scdino-trainer", code, parts.Stages(), kShutdownBound);
}

}  // namespace scdino::programs::trainer_main
