// File helpers for outputs that must never be left half-written, on top of
// the file-system layer (common/env.h): every file scdino writes goes
// through one of these or through AtomicFile.
// Thread-safe: each call works on its own descriptors through the Env.
#pragma once

#include <string>
#include <string_view>

#include "common/env.h"
#include "common/status.h"

namespace scdino {

/// Writes `data` to `path` atomically: an exclusively created temporary
/// beside it (TempPathFor), fsync, rename over `path`, fsync of the
/// directory. On any failure the temporary is removed and a previous `path`
/// is left untouched; the Status names the path and the system's reason
/// (disk full, permission).
Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

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

bool FileExists(const std::string& path);

}  // namespace scdino
