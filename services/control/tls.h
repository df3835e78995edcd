// TLS identities of the control API: by default each start of a service
// makes a fresh key and a self-signed certificate in the run directory, and
// the endpoint file carries the certificate's fingerprint, so a client pins
// exactly that certificate (docs/control.md#trust-model): a server that
// cannot prove it holds the run's key never sees the token.
// Functions of their arguments; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace scdino::control {

struct TlsIdentity {
  std::string cert_file, key_file;
  std::string fingerprint;  ///< "sha256:" + 64 hex digits of the certificate's DER
  std::string name;         ///< the DNS name it is issued to (what a client verifies)
};

/// A new P-256 key and a self-signed certificate issued to `name` (and to
/// `host`, for tools that connect by host name), valid for 400 days, written
/// as <dir>/<stem>.key and <dir>/<stem>.crt, both mode 0600; `dir` is
/// created 0700. Errors name the file.
StatusOr<TlsIdentity> MakeSelfSignedIdentity(const std::string& dir, const std::string& stem, const std::string& name,
                                             const std::string& host);

/// The identity of a certificate and key of the user's own
/// (scdino.control.tls_cert_file / tls_key_file): its fingerprint and the
/// name it is issued to (the first DNS subjectAltName, else the common name).
StatusOr<TlsIdentity> DescribeIdentity(const std::string& cert_file, const std::string& key_file);

/// "sha256:<hex>" of the first certificate in `pem`; InvalidArgument when
/// `pem` holds none. `what` names the source in errors.
StatusOr<std::string> CertificateFingerprint(const std::string& pem, const std::string& what);

}  // namespace scdino::control
