// The client side of the control API: finding a run's server (endpoint file
// and token in its run directory, or an explicit target and token file) and
// opening a channel whose calls carry the token.
// A channel may be shared by threads (gRPC channels are thread-safe); the functions are reentrant.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  std::string tls_ca_file;  ///< PEM roots for TLS; empty: tls_root_pem, else the system's
  /// The one certificate a run's client trusts (pinned from the endpoint
  /// file), and the name to verify in it instead of the host's.
  std::string tls_root_pem, tls_name;
  /// Set when the run serves without TLS (scdino.control.plaintext).
  std::string plaintext_warning;
};

/// From <run_dir>/endpoints/<service>.json and the run's own token,
/// <run_dir>/control.token (or `token_file` when the user names one): both
/// must be the caller's and not writable by others, and the endpoint's proof
/// must match the token, else nothing is sent anywhere (see ReadToken,
/// ReadEndpoint, VerifyEndpoint). The endpoint's process must not be known
/// to have ended (NotFound with StaleEndpointMessage), and with TLS the
/// certificate file must have the fingerprint the endpoint names: the
/// channel then trusts that certificate alone, so a listener without the
/// run's key fails the handshake before any call (and token) is sent.
StatusOr<ClientTarget> ResolveRun(const std::string& run_dir, const std::string& service,
                                  const std::string& token_file = "");

/// Replaces the run's token by a new random one (`token_file`, or
/// <run_dir>/control.token) and signs the endpoint files of the run's
/// running services with it; their servers take the new token at the next
/// call that presents it, and the old one is refused from then on. Returns
/// the services whose endpoint files were re-signed.
StatusOr<std::vector<std::string>> RotateToken(const std::string& run_dir, const std::string& token_file = "");

/// A channel to the target (TLS when asked).
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientTarget& t);

/// Adds the token to a call.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace scdino::control
