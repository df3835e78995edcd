// Tests of what another local user of a shared node can and cannot do.
// Root (CI runs as root) passes every permission check, so the part of a
// test that must meet permissions runs in a child process that becomes the
// unprivileged user `nobody` (uid and gid 65534, present on every Debian
// system); files "owned by another user" are given to that uid. Run as an
// ordinary user, the same tests meet the permissions directly.
#pragma once

#include <grp.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace scdino::testing {

inline constexpr uid_t kOtherUid = 65534;
inline constexpr gid_t kOtherGid = 65534;

/// In a death-test child: drops root to `nobody` (no supplementary groups);
/// a no-op for a process that is not root. Exits 99 if the switch fails.
inline void BecomeOtherUserIfRoot() {
  if (::geteuid() != 0) return;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(kOtherGid, kOtherGid, kOtherGid) != 0 ||
      ::setresuid(kOtherUid, kOtherUid, kOtherUid) != 0) {
    std::perror("cannot become uid 65534");
    std::_Exit(99);
  }
}

/// Gives `path` to `nobody` (root only); false when the caller is not root.
inline bool GiveToOtherUser(const std::string& path) {
  return ::geteuid() == 0 && ::chown(path.c_str(), kOtherUid, kOtherGid) == 0;
}

}  // namespace scdino::testing
