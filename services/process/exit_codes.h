// Process exit codes shared by the services, their one table (every
// program's --help, docs/exit-codes.md and deploy/slurm/lib.sh's requeue
// rules are generated from it: `scdino-config exit-codes`), and the one
// mapping from an error's Status to its exit code; the one way a process
// ends from a thread that cannot return an error (ExitForLostPeer).
// Constants and pure functions but that one; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace scdino::process {

inline constexpr int kExitCompleted = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitStopped = 3;       ///< --stop-after-iterations
inline constexpr int kExitStoppedByApi = 4;  ///< scdinoctl stop: progress saved; do not requeue
/// Training diverged (a non-finite loss, a collapse with on_collapse: stop):
/// running it again would diverge again, so never requeued, even when a
/// signal came at the same time.
inline constexpr int kExitDiverged = 5;
/// scdino-preflight: a check of the job's nodes, GPUs, network or storage
/// is below its threshold; requeueing onto the same nodes would not help.
inline constexpr int kExitPreflightFailed = 6;
/// scdino-trainer completed with scdino.learning_check: require, but at the
/// last learning check the teacher's features were no better than a random
/// ViT's or the raw pixels' (docs/training.md): the
/// checkpoints are there, the model did not learn; never requeued.
inline constexpr int kExitDidNotLearn = 7;
/// A write found the disk or the quota full (a checkpoint, the features):
/// what was written before is complete; never requeued (it would fail again
/// until space is made).
inline constexpr int kExitNoSpace = 8;
/// A peer rank or its node was lost mid-run (the ranks left name it): the
/// last complete checkpoint is intact; the batch scripts requeue, and the
/// job resumes on the nodes Slurm gives it (scdino.elastic_resume).
inline constexpr int kExitPeerLost = 9;
inline constexpr int kExitPreempted = 75;    ///< a signal: progress saved; requeue

/// The programs a code can end (a bit each).
enum ExitProgram : unsigned {
  kProgramTrainer = 1u << 0,
  kProgramFeatures = 1u << 1,
  kProgramEval = 1u << 2,
  kProgramPreflight = 1u << 3,
  kProgramPack = 1u << 4,
  kProgramStats = 1u << 5,
  kProgramExport = 1u << 6,
  kProgramConfig = 1u << 7,
  kProgramAll = (1u << 8) - 1,
};

/// What deploy/slurm/lib.sh does when a step ends with a code.
enum class Requeue {
  kAlways,          ///< the job is requeued and resumes from the last checkpoint
  kAfterJobSignal,  ///< requeued only when a job-wide signal ended the step
  kNever,           ///< never requeued, signal or not: it would end the same way
};

struct ExitCodeInfo {
  int code;
  const char* help;     ///< a few words, for --help
  const char* meaning;  ///< the reference's sentence(s)
  unsigned programs;    ///< ExitProgram bits
  Requeue requeue;
};

/// Every code, in order.
const std::vector<ExitCodeInfo>& ExitCodeTable();
/// The program's bit from its name ("scdino-trainer", ...); 0 for none.
unsigned ExitProgramOf(const std::string& program);
/// "Exit codes: 0 completed, 1 failed, ..." of the codes `program` can end
/// with, for its --help.
std::string ExitCodesHelp(const std::string& program);
/// The Markdown table of docs/exit-codes.md.
std::string ExitCodesMarkdown();
/// deploy/slurm/lib.sh's block: the codes listed as comments, and the
/// variables its requeue rules read (scdino_requeue_codes,
/// scdino_never_requeue_codes).
std::string ExitCodesShell();

/// Says "scdino: <message>; exiting with 9 ..." on stderr and ends the
/// process at once with kExitPeerLost: the mains' reaction to a collective
/// that a lost peer never completes (training::DistributedOptions::on_lost_peer).
[[noreturn]] void ExitForLostPeer(const std::string& message);

/// kExitBadInput for what the user can fix in the input (a bad config,
/// data set, image, checkpoint or channel selection: InvalidArgument,
/// NotFound, DataLoss, FailedPrecondition, AlreadyExists), else kExitFailed
/// (disk, network, a dead peer, an internal error); kExitDiverged for
/// Diverged, kExitNoSpace for NoSpace, kExitPeerLost for PeerLost.
inline int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitCompleted;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists: return kExitBadInput;
    case StatusCode::kDiverged: return kExitDiverged;
    case StatusCode::kNoSpace: return kExitNoSpace;
    case StatusCode::kPeerLost: return kExitPeerLost;
    default: return kExitFailed;
  }
}

}  // namespace scdino::process
