// gRPC server reflection (grpc.reflection.v1alpha, what grpcurl and
// grpc_cli ask) behind the run's token: gRPC's own plugin answers anyone,
// so the control server serves this one instead. It answers from the
// protobuf descriptors linked into the process; every stream is admitted
// once, at its start, by the server's token check, and at most
// kMaxReflectionStreams are open at a time (each holds a server thread).
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace scdino::control {

inline constexpr int kMaxReflectionStreams = 8;

class ReflectionService final : public ::grpc::reflection::v1alpha::ServerReflection::Service {
 public:
  /// `services`: what list_services names; `admit`: the check a stream
  /// passes before any answer (a status other than OK ends it with that).
  ReflectionService(std::vector<std::string> services, std::function<grpc::Status(grpc::ServerContext*)> admit);

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<::grpc::reflection::v1alpha::ServerReflectionResponse,
                               ::grpc::reflection::v1alpha::ServerReflectionRequest>* stream) override;

 private:
  /// The answer to one question (a function of the request and the
  /// linked descriptors).
  ::grpc::reflection::v1alpha::ServerReflectionResponse Answer(
      const ::grpc::reflection::v1alpha::ServerReflectionRequest& request) const;

  std::vector<std::string> services_;
  std::function<grpc::Status(grpc::ServerContext*)> admit_;
  std::atomic<int> streams_{0};
};

}  // namespace scdino::control
