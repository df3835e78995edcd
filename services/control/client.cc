#include "control/client.h"

#include <grpcpp/grpcpp.h>

#include "common/files.h"
#include "control/endpoint.h"
#include "control/token.h"

namespace scdino::control {

StatusOr<ClientTarget> ResolveRun(const std::string& run_dir, const std::string& service,
                                  const std::string& token_file) {
  auto e = ReadEndpoint(run_dir, service);
  if (!e.ok()) return e.status();
  // Never the path an endpoint file names: whoever can write the file could
  // otherwise make us read and send any private file of the user.
  auto token = ReadToken(token_file.empty() ? run_dir + "/control.token" : token_file);
  if (!token.ok()) return token.status();
  if (auto s = VerifyEndpoint(*e, *token, EndpointPath(run_dir, service)); !s.ok()) return s;
  ClientTarget t;
  t.target = e->target();
  t.tls = e->tls;
  t.token = *token;
  return t;
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientTarget& t) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (t.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!t.tls_ca_file.empty()) {
      auto ca = ReadFile(t.tls_ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateChannel(t.target, creds);
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace scdino::control
