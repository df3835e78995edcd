// The client side of the control API: finding a run's server (endpoint file
// and token in its run directory, or an explicit target and token file) and
// opening a channel whose calls carry the token.
// A channel may be shared by threads (gRPC channels are thread-safe); the functions are reentrant.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace scdino::control {

struct ClientTarget {
  std::string target;       ///< host:port
  std::string token;
  bool tls = false;
  std::string tls_ca_file;  ///< PEM roots for TLS; empty: the system's
};

/// From <run_dir>/endpoints/<service>.json and the run's own token,
/// <run_dir>/control.token (or `token_file` when the user names one): both
/// must be the caller's and not writable by others, and the endpoint's proof
/// must match the token, else nothing is sent anywhere (see ReadToken,
/// ReadEndpoint, VerifyEndpoint).
StatusOr<ClientTarget> ResolveRun(const std::string& run_dir, const std::string& service,
                                  const std::string& token_file = "");

/// A channel to the target (TLS when asked).
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientTarget& t);

/// Adds the token to a call.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace scdino::control
