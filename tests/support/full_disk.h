// A real full disk for a test: `write` runs in a child process in which
// `dir` is a small tmpfs or ext4 (a private mount namespace, so nothing outside the
// child sees it, and nothing is left mounted if the test dies). The child's
// Status comes back with its code and message. Needs root (CAP_SYS_ADMIN),
// as the test machines give; elsewhere the test skips, saying so.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace scdino::testing {

/// The Status `write` returned with `dir` mounted as a file system `fs`
/// (tmpfs, or ext4 on a loop device: a disk whose directories take blocks)
/// of `kib` KiB (Internal if the child died); nullopt, with the reason in
/// *why, only where a private mount namespace or the file system is
/// refused.
inline std::optional<Status> OnAFullDisk(const std::string& dir, int kib, const std::function<Status()>& write,
                                         std::string* why, const std::string& fs = "tmpfs") {
  int fds[2];
  if (::pipe(fds) != 0) {
    *why = std::string("pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto reply = [&](int code, const std::string& message) {
      const std::string out = std::to_string(code) + "\n" + message;
      (void)!::write(fds[1], out.data(), out.size());
      ::_exit(0);
    };
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      reply(-1, std::string("no private mount namespace: ") + std::strerror(errno));
    }
    if (fs == "tmpfs") {
      const std::string size = "size=" + std::to_string(kib) + "k";
      if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, size.c_str()) != 0) {
        reply(-1, "cannot mount a tmpfs on " + dir + ": " + std::strerror(errno));
      }
    } else {
      // An ext4 image beside `dir`, 1 KiB blocks, no reserve, no journal,
      // on a loop device mount(8) detaches again with the mount.
      const std::string image = dir + ".img";
      const std::string make = "truncate -s " + std::to_string(kib) + "k '" + image +
                               "' && mkfs.ext4 -q -F -b 1024 -m 0 -N 32 -O ^has_journal '" + image +
                               "' >/dev/null 2>&1 && mount -o loop '" + image + "' '" + dir + "' 2>&1";
      if (std::system(make.c_str()) != 0) reply(-1, "cannot make and mount an ext4 image on " + dir + " (loop devices?)");
    }
    const Status s = write();
    reply(static_cast<int>(s.code()), s.message());
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto nl = got.find('\n');
  if (nl == std::string::npos) {
    return Status::Internal("the writing child ended without an answer (wait status " + std::to_string(status) + ")");
  }
  const int code = std::stoi(got.substr(0, nl));
  const std::string message = got.substr(nl + 1);
  if (code < 0) {
    *why = message;
    return std::nullopt;
  }
  switch (static_cast<StatusCode>(code)) {
    case StatusCode::kOk: return Status::Ok();
    case StatusCode::kNoSpace: return Status::NoSpace(message);
    case StatusCode::kIOError: return Status::IOError(message);
    default: return Status::Internal("status " + std::to_string(code) + ": " + message);
  }
}

}  // namespace scdino::testing
