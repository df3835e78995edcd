#include "process/exit_codes.h"

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

namespace scdino::process {

namespace {

constexpr unsigned kWriters = kProgramTrainer | kProgramFeatures | kProgramEval | kProgramPreflight | kProgramPack |
                              kProgramStats | kProgramExport;
constexpr unsigned kStoppable = kProgramTrainer | kProgramFeatures | kProgramEval | kProgramPreflight | kProgramPack;

const std::pair<const char*, unsigned> kPrograms[] = {
    {"scdino-trainer", kProgramTrainer}, {"scdino-features", kProgramFeatures}, {"scdino-eval", kProgramEval},
    {"scdino-preflight", kProgramPreflight}, {"scdino-pack", kProgramPack},   {"scdino-stats", kProgramStats},
    {"scdino-export", kProgramExport},       {"scdino-config", kProgramConfig},
};

std::string ProgramsOf(unsigned bits) {
  if (bits == kProgramAll) return "every program";
  std::string out;
  for (const auto& [name, bit] : kPrograms) {
    if (bits & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

const char* RequeueWords(Requeue r) {
  switch (r) {
    case Requeue::kAlways: return "requeued";
    case Requeue::kAfterJobSignal: return "requeued only after a job-wide signal";
    case Requeue::kNever: return "never requeued";
  }
  return "";
}

}  // namespace

const std::vector<ExitCodeInfo>& ExitCodeTable() {
  static const std::vector<ExitCodeInfo> table = {
      {kExitCompleted, "completed", "The work is done (a preflight: every check passed).", kProgramAll,
       Requeue::kNever},
      {kExitFailed, "failed",
       "Failed on something other than the input: a disk or network error, a lost rendezvous, an internal error. "
       "The message names the file or step.",
       kProgramAll, Requeue::kAfterJobSignal},
      {kExitBadInput, "bad input",
       "Bad input, named in the message: a config, data set, image, checkpoint or statistics file; a channel "
       "selection the images cannot satisfy; a run directory others can write; `scdino.device: cuda` on a task "
       "without a GPU; a GPU driver older than the build's CUDA needs; a batch and crops the device's memory "
       "cannot hold (the message says what to lower). Fix the input and submit again.",
       kProgramAll, Requeue::kNever},
      {kExitStopped, "stopped by --stop-after-iterations",
       "Stopped at `--stop-after-iterations`; a checkpoint was written. Run again to resume.", kProgramTrainer,
       Requeue::kAfterJobSignal},
      {kExitStoppedByApi, "stopped through the control API",
       "Stopped through the control API (`scdinoctl stop`) after saving its progress (a checkpoint; complete "
       "feature shards). Every rank exits 4.",
       kProgramTrainer | kProgramFeatures | kProgramEval, Requeue::kNever},
      {kExitDiverged, "diverged",
       "Training diverged: a non-finite loss (`scdino.on_nonfinite_loss: stop`) or a collapse with "
       "`scdino.on_collapse: stop` (or more than `scdino.max_recoveries` with `recover`). Running it again would "
       "diverge again: change the recipe (docs/training.md).",
       kProgramTrainer, Requeue::kNever},
      {kExitPreflightFailed, "a check is below its threshold",
       "A preflight check of the job's nodes, GPUs, network or storage is below its threshold "
       "(`scdino.preflight.*`). The same nodes would fail it again.",
       kProgramPreflight, Requeue::kNever},
      {kExitDidNotLearn, "did not learn (scdino.learning_check: require)",
       "Training completed, but at the last learning check the teacher's features were no better than a random "
       "ViT's or the raw pixels' (only with `scdino.learning_check: require`). The checkpoints are there.",
       kProgramTrainer, Requeue::kNever},
      {kExitNoSpace, "the disk or quota is full",
       "A write found the disk or the quota full; the message names the file. What was written before is "
       "complete (the last checkpoint is unchanged). Make space, then run again.",
       kWriters, Requeue::kNever},
      {kExitPeerLost, "a peer rank or its node was lost",
       "A rank or its node was lost mid-run, or did not come to the rendezvous (twice within "
       "`scdino.distributed_timeout_s`); every rank left names it. The last complete checkpoint (complete feature "
       "shards) is intact, and a job submitted with `--nodes=MIN-MAX` resumes on the nodes Slurm gives it "
       "(docs/distributed.md).",
       kProgramTrainer | kProgramFeatures | kProgramPreflight, Requeue::kAlways},
      {kExitPreempted, "stopped by a signal after saving its progress",
       "Stopped by SIGTERM, SIGUSR1 or SIGINT (preemption, the time limit, Ctrl-C) after saving its progress. "
       "Requeue or run again to resume.",
       kStoppable, Requeue::kAlways},
  };
  return table;
}

unsigned ExitProgramOf(const std::string& program) {
  for (const auto& [name, bit] : kPrograms) {
    if (program == name) return bit;
  }
  return 0;
}

std::string ExitCodesHelp(const std::string& program) {
  const unsigned bit = ExitProgramOf(program);
  std::string out = "Exit codes:";
  bool first = true;
  for (const auto& e : ExitCodeTable()) {
    if (!(e.programs & bit)) continue;
    out += (first ? " " : ", ") + std::to_string(e.code) + " " + e.help;
    first = false;
  }
  return out + " (docs/exit-codes.md).";
}

std::string ExitCodesMarkdown() {
  std::ostringstream out;
  out << "| code | meaning | programs | batch scripts |\n|---|---|---|---|\n";
  for (const auto& e : ExitCodeTable()) {
    out << "| " << e.code << " | " << e.meaning << " | " << ProgramsOf(e.programs) << " | "
        << RequeueWords(e.requeue) << " |\n";
  }
  return out.str();
}

std::string ExitCodesShell() {
  std::ostringstream out;
  std::string requeue, never;
  for (const auto& e : ExitCodeTable()) {
    out << "#   " << e.code << (e.code < 10 ? "   " : "  ") << e.help << ": " << RequeueWords(e.requeue) << "\n";
    if (e.requeue == Requeue::kAlways) requeue += (requeue.empty() ? "" : " ") + std::to_string(e.code);
    if (e.requeue == Requeue::kNever) never += (never.empty() ? "" : " ") + std::to_string(e.code);
  }
  out << "scdino_requeue_codes=\"" << requeue << "\"\n";
  out << "scdino_never_requeue_codes=\"" << never << "\"\n";
  return out.str();
}

void ExitForLostPeer(const std::string& message) {
  std::cerr << "scdino: " << message << "; exiting with " << kExitPeerLost
            << " so that the job requeues and resumes from its last complete checkpoint" << std::endl;
  std::_Exit(kExitPeerLost);
}

}  // namespace scdino::process
