// The per-run control token: a random secret in the run directory (0600,
// owned by the user who runs the job), presented by callers as
// "authorization: Bearer <token>". docs/control.md#trust-model says who can
// do what with it.
// Functions of their arguments; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace scdino::control {

/// Reads the token at `path` the way a client must: opened with O_NOFOLLOW
/// and checked with fstat on the open descriptor (no stat-then-read race):
/// a regular file, owned by the calling user, with no permission bits for
/// group or others, holding at least 16 characters. So neither a symlink,
/// nor another user's file, nor a file others could have planted is ever
/// read and sent. Errors name the path and the check that failed.
StatusOr<std::string> ReadToken(const std::string& path);

/// The server side: reads the token, or when the file does not exist
/// creates it with 64 random hex digits and mode 0600 (exclusively, then
/// linked into place, so concurrent starters agree on one token).
StatusOr<std::string> LoadOrCreateToken(const std::string& path);

/// Compares in time independent of where the strings differ.
bool TokensEqual(const std::string& a, const std::string& b);

/// HMAC-SHA256 of `message` keyed by `token`, as 64 hex digits: what an
/// endpoint file carries to prove that the run holding the token wrote it,
/// so a client never sends the token to an address someone else planted.
std::string TokenProof(const std::string& token, const std::string& message);

}  // namespace scdino::control
