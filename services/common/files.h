// File helpers for outputs that must never be left half-written.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace scdino {

/// Writes `data` to `path` atomically: a temporary file in the same
/// directory, fsync, rename over `path`, fsync of the directory. On any
/// failure the temporary is removed and a previous `path` is left untouched;
/// the Status names the path and the system's reason (disk full, permission).
Status WriteFileAtomic(const std::string& path, std::string_view data);

/// Reads a whole file; NotFound or IOError name the path.
StatusOr<std::string> ReadFile(const std::string& path);

/// Creates a directory and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);

bool FileExists(const std::string& path);

}  // namespace scdino
