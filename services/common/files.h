// File helpers for outputs that must never be left half-written, on top of
// the file-system layer (common/env.h): every file scdino writes goes
// through one of these or through AtomicFile.
// Thread-safe: each call works on its own descriptors through the Env.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace scdino {

/// Writes `data` to `path` atomically: an exclusively created temporary
/// beside it (TempPathFor), fsync, rename over `path`, fsync of the
/// directory. On any failure the temporary is removed and a previous `path`
/// is left untouched; the Status names the path and the system's reason
/// (disk full, permission).
Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

/// Installs a copy of `from` at `to` atomically: a hard link where the file
/// system allows one (free, and `from` is only ever replaced by a rename),
/// else a copy streamed into an exclusive temporary, fsynced and renamed. On
/// failure the temporary is removed and a previous `to` is left untouched; a
/// full disk or quota is NoSpace, naming both paths.
Status CopyFileAtomic(const std::string& from, const std::string& to);

/// Reads a whole file; NotFound or IOError name the path.
StatusOr<std::string> ReadFile(const std::string& path);

/// What ReadOwnFile requires of a file besides being the caller's.
enum class Exposure {
  kNotWritableByOthers,  ///< others may read it, not write it (an endpoint file)
  kPrivate,              ///< no permission at all for group or others (a secret)
};

/// Reads a file the way a reader that trusts its content must: opened with
/// O_NOFOLLOW | O_NONBLOCK and checked with fstat on the open descriptor (no
/// race between check and read): a regular file (not a symlink, FIFO or
/// device), owned by the calling user, exposed no more than `exposure`, of at
/// most `max_bytes`. NotFound, or FailedPrecondition naming the path, `what`
/// ("the control token") and the check that failed.
StatusOr<std::string> ReadOwnFile(const std::string& path, const std::string& what, Exposure exposure,
                                  size_t max_bytes);

/// Creates a directory and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);

/// Runs `attempt` again while it fails NotFound or DataLoss, after each of
/// `waits` (1, 2, 4 and 8 s: 15 s in all), saying so once on `log` (may be
/// null) for `what`: a node whose view of a shared file system lags (NFS's
/// attribute and lookup caches) may not yet see a file another node wrote,
/// or see it cut. Any other outcome is returned at once; after the waits,
/// the last failure, saying how long it was waited for.
Status RetryWhileFileLags(const std::function<Status()>& attempt, const std::string& what, std::ostream* log,
                          const std::vector<std::chrono::milliseconds>& waits = {
                              std::chrono::seconds(1), std::chrono::seconds(2), std::chrono::seconds(4),
                              std::chrono::seconds(8)});

/// What a run trusts without a ReadOwnFile of its own (its run directory, a
/// checkpoint it resumes from, the channel statistics it normalises with)
/// must be the caller's and writable by no one else: on a shared file
/// system another user who could write it could plant weights or
/// statistics. FailedPrecondition names the path, `what`, its owner and mode
/// and the fix; NotFound when it does not exist. Follows symbolic links (a
/// run directory on scratch reached through a link is fine; the target is
/// what is checked).
Status CheckOwnPath(const std::string& path, const std::string& what);

/// MakeDirs, then `mode` (e.g. 0750) on the directory when this call created
/// it, then CheckOwnPath: a run directory that already exists keeps its mode
/// when that mode is safe and is refused otherwise.
Status MakeOwnDir(const std::string& path, int mode, const std::string& what);

/// 64 random hex digits (256 bits from the system's generator).
std::string NewSecret();

/// The content of a private secret file (mode 0600, ReadOwnFile's checks),
/// created when missing with 64 random hex digits: exclusively under a
/// temporary name, then linked into place, so processes that start together
/// (the ranks of a job on a shared file system) agree on one secret.
StatusOr<std::string> LoadOrCreateSecret(const std::string& path, const std::string& what);

bool FileExists(const std::string& path);

}  // namespace scdino
