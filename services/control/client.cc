#include "control/client.h"

#include <grpcpp/grpcpp.h>

#include "common/files.h"
#include "control/endpoint.h"
#include "control/token.h"

namespace scdino::control {

StatusOr<ClientTarget> ResolveRun(const std::string& run_dir, const std::string& service) {
  auto e = ReadEndpoint(run_dir, service);
  if (!e.ok()) return e.status();
  ClientTarget t;
  t.target = e->target();
  t.tls = e->tls;
  auto token = ReadToken(e->token_file.empty() ? run_dir + "/control.token" : e->token_file);
  if (!token.ok()) return token.status();
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
