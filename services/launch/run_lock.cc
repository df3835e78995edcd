#include "launch/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <thread>

#include "common/env.h"

namespace scdino::run {
namespace {

// The holder's line, and its world (between "world=" and ";").
std::string ReadHolder(int fd) {
  char buf[1024];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string WorldIn(const std::string& holder) {
  const auto at = holder.find("world=");
  if (at == std::string::npos) return "";
  const auto end = holder.find(';', at);
  return holder.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

}  // namespace

RunDirLock& RunDirLock::operator=(RunDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) close(fd_);  // drops the lock; the file stays, naming the last holder
}

std::string WorldOf(const LaunchInfo& launch) {
  if (launch.source == "slurm") return launch.attempt.substr(0, launch.attempt.find(" step "));  // "slurm job J"
  if (launch.source == "torchrun") {
    // torchrun's run id defaults to "none": then each launch is its own world.
    const std::string world = launch.attempt.substr(0, launch.attempt.find(" restart "));
    if (world != "torchrun run none" && world != "torchrun run -") return world;
  }
  return "process " + std::to_string(getpid()) + " on " + ThisHostName();
}

StatusOr<RunDirLock> LockRunDir(const std::string& dir, const std::string& service, const LaunchInfo& launch,
                                std::chrono::seconds same_world_wait, std::ostream* warn) {
  if (launch.rank != 0) return RunDirLock();
  const std::string path = dir + "/" + service + ".lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  const std::string world = WorldOf(launch);
  const auto deadline = std::chrono::steady_clock::now() + same_world_wait;
  bool said = false;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      close(fd);
      if (warn) {
        *warn << "scdino: warning: " << path << ": the file system takes no locks (" << std::strerror(err)
              << "): nothing stops a second run from writing " << dir << " at the same time\n";
      }
      return RunDirLock();
    }
    if (err != EWOULDBLOCK) {
      close(fd);
      return Status::IOError("cannot lock " + path + ": " + std::strerror(err));
    }
    const std::string holder = ReadHolder(fd);
    if (WorldIn(holder) != world || holder.empty()) {
      close(fd);
      return Status::AlreadyExists(dir + " is in use: " + path + " is held by " +
                                   (holder.empty() ? std::string("a process that has not yet said who it is") : holder) +
                                   "; this is " + world + " (" + launch.source +
                                   " launch). Two worlds writing one run directory would overwrite each other's "
                                   "checkpoints: wait for that run to end, or give this one another "
                                   "meta.name_of_run or meta.output_dir (a RANK or WORLD_SIZE left in the submitting "
                                   "shell can make one job several one-rank runs: see docs/distributed.md)");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      close(fd);
      return Status::PeerLost(path + " is still held by an earlier attempt of " + world + " (" + holder +
                              ") after " + std::to_string(same_world_wait.count()) +
                              " s: its node may be lost with the lock's lease not yet expired; this attempt ends "
                              "so that the job is requeued");
    }
    if (!said && warn) {
      *warn << "scdino: " << path << " is held by an earlier attempt of this job (" << holder << "); waiting up to "
            << same_world_wait.count() << " s for it to end\n";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const std::string line = "host=" + ThisHostName() + "; pid=" + std::to_string(getpid()) + "; world=" + world +
                           "; attempt=" + launch.attempt + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    close(fd);
    return Status::IOError("cannot write " + path + ": " + std::strerror(err));
  }
  return RunDirLock(fd, path);
}

}  // namespace scdino::run
