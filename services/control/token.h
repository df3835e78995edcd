// The per-run control token: a random secret in the run directory (0600),
// presented by callers as "authorization: Bearer <token>".
#pragma once

#include <string>

#include "common/status.h"

namespace scdino::control {

/// Reads the token at `path`; when the file does not exist, creates it with
/// 64 random hex digits and mode 0600 (atomically, so concurrent starters
/// agree). An existing file readable by others is refused.
StatusOr<std::string> LoadOrCreateToken(const std::string& path);

/// Reads an existing token file (the client side); NotFound names the path.
StatusOr<std::string> ReadToken(const std::string& path);

/// Compares in time independent of where the strings differ.
bool TokensEqual(const std::string& a, const std::string& b);

}  // namespace scdino::control
