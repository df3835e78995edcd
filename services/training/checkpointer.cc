#include "training/checkpointer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <regex>

#include "common/env.h"
#include "common/files.h"

namespace scdino::training {

namespace {
using Clock = std::chrono::steady_clock;

std::string Numbered(const char* fmt, int64_t v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, static_cast<long long>(v));
  return buf;
}
}  // namespace

Checkpointer::Checkpointer(std::string run_dir, CheckpointPolicy policy, run::Coordinator& coordinator,
                           model::Dino& dino, CheckpointInfo info,
                           std::function<void(const CheckpointReport&)> on_written)
    : run_dir_(std::move(run_dir)),
      latest_(run_dir_ + "/checkpoint.safetensors"),
      policy_(policy),
      coordinator_(coordinator),
      dino_(dino),
      info_(std::move(info)),
      on_written_(std::move(on_written)) {}

std::string Checkpointer::NumberedPath(int64_t epoch) const {
  return run_dir_ + "/" + Numbered("checkpoint%04lld.safetensors", epoch);
}

std::string Checkpointer::SnapshotPath(int64_t iteration) const {
  return run_dir_ + "/" + Numbered("checkpoint_it%08lld.safetensors", iteration);
}

bool Checkpointer::TimeDue() const {
  if (policy_.every_minutes <= 0 || !coordinator_.is_rank_zero()) return false;
  return Clock::now() - last_write_ >= std::chrono::duration<double>(policy_.every_minutes * 60.0);
}

Status Checkpointer::Write(const std::string& path, int64_t iteration, int64_t niter) {
  const auto t0 = Clock::now();
  Status written = Status::Ok();
  if (coordinator_.is_rank_zero()) {
    CheckpointInfo info = info_;
    info.iteration = iteration;
    info.epoch = iteration / niter;
    written = SaveCheckpoint(path, dino_, info);
  }
  // Every rank learns whether rank 0's write worked (and whether the disk
  // was full), so that a failed write stops all of them now, with the same
  // exit code, rather than leaving the others in the next collective until
  // the timeout.
  const auto outcome = coordinator_.Sum({written.ok() ? 0.0 : 1.0,
                                         written.code() == StatusCode::kNoSpace ? 1.0 : 0.0});
  if (outcome[0] > 0 && written.ok()) {
    const std::string m = "rank 0 could not write checkpoint " + path + " (its log says why); stopping";
    return outcome[1] > 0 ? Status::NoSpace(m + ": no space left") : Status::IOError(m);
  }
  if (!written.ok()) return written;
  last_write_ = Clock::now();
  if (coordinator_.is_rank_zero() && on_written_) {
    CheckpointReport r;
    r.path = std::filesystem::absolute(path).string();
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    r.iteration = iteration;
    on_written_(r);
  }
  return Status::Ok();
}

Status Checkpointer::EndOfEpoch(int64_t epoch, int64_t iteration, int64_t niter, bool last) {
  if (auto s = Write(latest_, iteration, niter); !s.ok()) return s;
  if ((epoch + 1) % policy_.every_epochs != 0 && !last) return Status::Ok();
  if (auto s = Write(NumberedPath(epoch), iteration, niter); !s.ok()) return s;
  Retain();
  return Status::Ok();
}

Status Checkpointer::KeepAsHealthy() {
  Status kept = Status::Ok();
  if (coordinator_.is_rank_zero()) kept = CopyFileAtomic(latest_, HealthyPath());
  // As for a checkpoint: every rank stops now, with rank 0's exit code.
  const auto outcome = coordinator_.Sum({kept.ok() ? 0.0 : 1.0, kept.code() == StatusCode::kNoSpace ? 1.0 : 0.0});
  if (outcome[0] > 0 && kept.ok()) {
    const std::string m = "rank 0 could not keep the healthy checkpoint " + HealthyPath() + " (its log says why)";
    return outcome[1] > 0 ? Status::NoSpace(m + ": no space left") : Status::IOError(m);
  }
  return kept;
}

Status Checkpointer::ResumePoint(int64_t iteration, int64_t niter) { return Write(latest_, iteration, niter); }

StatusOr<std::string> Checkpointer::Snapshot(int64_t iteration, int64_t niter) {
  const std::string path = SnapshotPath(iteration);
  if (auto s = Write(path, iteration, niter); !s.ok()) return s;
  if (auto s = Write(latest_, iteration, niter); !s.ok()) return s;
  return std::filesystem::absolute(path).string();
}

void Checkpointer::Retain() {
  if (policy_.keep <= 0 || !coordinator_.is_rank_zero()) return;
  auto names = Env::Default()->ListDir(run_dir_);
  if (!names.ok()) return;
  static const std::regex numbered("checkpoint[0-9]{4,}\\.safetensors");
  std::vector<std::string> found;
  for (const auto& n : *names) {
    if (std::regex_match(n, numbered)) found.push_back(n);
  }
  // Names sort by epoch (zero-padded; a fifth digit only past epoch 9999).
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  for (size_t i = 0; i + static_cast<size_t>(policy_.keep) < found.size(); ++i) {
    if (auto s = Env::Default()->RemoveFile(run_dir_ + "/" + found[i]); !s.ok()) {
      std::cerr << "scdino-trainer: cannot remove an old checkpoint: " << s.message() << "\n";
    }
  }
}

}  // namespace scdino::training
