// The run directory's lock: one world writes a run directory at a time. Rank
// 0 of a trainer takes <run_dir>/trainer.lock (flock, which the kernel drops
// when the process ends, however it ends, and which NFS carries as a lock of
// the whole file) and writes who holds it. A second, unrelated world (a
// leaked RANK making several one-rank runs, the same config submitted
// twice) is refused naming the holder; a previous attempt of the same Slurm
// job still holding it (its node lost, its NFS lease not yet expired) is
// waited for, and past the wait the attempt ends as a lost peer (requeued).
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "launch/launch.h"

namespace scdino::run {

/// Held until destroyed (or the process ends). Move-only.
class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();
  /// False on ranks other than 0 and where the file system has no locks.
  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

/// What tells one world from another across its attempts: "slurm job J",
/// "torchrun run R", or "process P on H" (a single process).
std::string WorldOf(const LaunchInfo& launch);

/// On rank 0, takes <dir>/<service>.lock (creating it 0600) and writes the
/// holder into it (host, pid, world, attempt); on other ranks holds nothing.
/// Held by another world: AlreadyExists naming the file and the holder, and
/// what to change. Held by an earlier attempt of this world: retried every
/// second for `same_world_wait`, then PeerLost. A file system without locks
/// (ENOLCK): a warning on `warn`, nothing held.
StatusOr<RunDirLock> LockRunDir(const std::string& dir, const std::string& service, const LaunchInfo& launch,
                                std::chrono::seconds same_world_wait = std::chrono::seconds(60),
                                std::ostream* warn = nullptr);

}  // namespace scdino::run
