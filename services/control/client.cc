#include "control/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "common/env.h"
#include "common/files.h"
#include "control/endpoint.h"
#include "control/tls.h"
#include "control/token.h"

namespace scdino::control {

namespace {

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

}  // namespace

StatusOr<ClientTarget> ResolveRun(const std::string& run_dir, const std::string& service,
                                  const std::string& token_file) {
  auto e = ReadEndpoint(run_dir, service);
  if (!e.ok()) return e.status();
  const std::string path = EndpointPath(run_dir, service);
  // Never the path an endpoint file names: whoever can write the file could
  // otherwise make us read and send any private file of the user.
  auto token = ReadToken(token_file.empty() ? run_dir + "/control.token" : token_file);
  if (!token.ok()) return token.status();
  if (auto s = VerifyEndpoint(*e, *token, path); !s.ok()) return s;
  const std::string here = ThisHostName();
  if (EndpointProcessState(*e, here) == ProcessState::kGone) {
    return Status::NotFound(StaleEndpointMessage(*e, path));
  }
  // A loopback address means the writer's own node: here it would reach
  // whatever listens on this node's loopback instead.
  if (IsLoopback(e->host) && !e->node.empty() && e->node != here) {
    return Status::FailedPrecondition(path + ": the " + service + " listens on " + e->target() + " of node " +
                                      e->node + ", which this node (" + here +
                                      ") cannot reach; run scdinoctl on " + e->node +
                                      ", or set scdino.control.listen to an address other nodes reach");
  }
  ClientTarget t;
  t.target = e->target();
  t.tls = e->tls;
  t.token = *token;
  if (!e->tls) {
    t.plaintext_warning = "the " + service + " of " + run_dir +
                          " serves without TLS (scdino.control.plaintext: true): the token travels in clear";
    return t;
  }
  // The certificate's path is covered by the proof, and its content by the
  // fingerprint: a replaced file is refused, not trusted.
  if (e->tls_cert.empty() || e->tls_fingerprint.empty() || e->tls_name.empty()) {
    return Status::FailedPrecondition(path + ": says TLS but names no certificate, fingerprint or name "
                                      "(written by an older scdino?); restart the service");
  }
  auto pem = ReadFile(e->tls_cert);
  if (!pem.ok()) return Status::FailedPrecondition(path + ": the server's certificate: " + pem.status().message());
  auto fingerprint = CertificateFingerprint(*pem, e->tls_cert);
  if (!fingerprint.ok()) return fingerprint.status();
  if (*fingerprint != e->tls_fingerprint) {
    return Status::FailedPrecondition(e->tls_cert + ": is not the certificate the " + service + " started with (" +
                                      *fingerprint + ", the endpoint file names " + e->tls_fingerprint +
                                      "); refusing to send the token to " + e->target());
  }
  t.tls_root_pem = *pem;
  t.tls_name = e->tls_name;
  return t;
}

StatusOr<std::vector<std::string>> RotateToken(const std::string& run_dir, const std::string& token_file) {
  const std::string path = token_file.empty() ? run_dir + "/control.token" : token_file;
  auto old = ReadToken(path);
  if (!old.ok()) return old.status();
  // Only endpoint files the old token signed are signed again.
  std::vector<Endpoint> signed_by_old;
  for (const char* service : {"trainer", "features", "eval"}) {
    auto e = ReadEndpoint(run_dir, service);
    if (e.ok() && VerifyEndpoint(*e, *old, EndpointPath(run_dir, service)).ok()) signed_by_old.push_back(*e);
  }
  const std::string fresh = NewSecret();
  if (auto s = WriteFileAtomic(path, fresh + "\n", 0600); !s.ok()) return s;
  std::vector<std::string> services;
  for (const Endpoint& e : signed_by_old) {
    if (auto s = WriteEndpoint(run_dir, e, fresh); !s.ok()) return s;
    services.push_back(e.service);
  }
  return services;
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientTarget& t) {
  // A stream to a process that died with its node, or hangs, ends within
  // about 40 s: keepalive pings every 30 s, 10 s for the answer.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (!t.tls) return grpc::CreateCustomChannel(t.target, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions ssl;
  if (!t.tls_ca_file.empty()) {
    auto ca = ReadFile(t.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  } else {
    ssl.pem_root_certs = t.tls_root_pem;
  }
  if (!t.tls_name.empty()) args.SetSslTargetNameOverride(t.tls_name);
  return grpc::CreateCustomChannel(t.target, grpc::SslCredentials(ssl), args);
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace scdino::control
