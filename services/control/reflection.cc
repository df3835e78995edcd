#include "control/reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>

#include <set>

namespace scdino::control {

namespace rf = ::grpc::reflection::v1alpha;
namespace pb = ::google::protobuf;

namespace {

// `file` and every file it imports, each once, the asked one first.
void AddFile(const pb::FileDescriptor* file, std::set<std::string>* seen, rf::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), seen, out);
}

void NotFound(const std::string& what, rf::ServerReflectionResponse* out) {
  auto* e = out->mutable_error_response();
  e->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  e->set_error_message(what + " is not known to this server");
}

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services,
                                     std::function<grpc::Status(grpc::ServerContext*)> admit)
    : services_(std::move(services)), admit_(std::move(admit)) {}

rf::ServerReflectionResponse ReflectionService::Answer(const rf::ServerReflectionRequest& req) const {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  rf::ServerReflectionResponse out;
  out.set_valid_host(req.host());
  *out.mutable_original_request() = req;
  std::set<std::string> seen;
  switch (req.message_request_case()) {
    case rf::ServerReflectionRequest::kListServices:
      for (const auto& name : services_) out.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case rf::ServerReflectionRequest::kFileByFilename:
      if (const auto* f = pool->FindFileByName(req.file_by_filename())) {
        AddFile(f, &seen, out.mutable_file_descriptor_response());
      } else {
        NotFound("file " + req.file_by_filename(), &out);
      }
      break;
    case rf::ServerReflectionRequest::kFileContainingSymbol:
      if (const auto* f = pool->FindFileContainingSymbol(req.file_containing_symbol())) {
        AddFile(f, &seen, out.mutable_file_descriptor_response());
      } else {
        NotFound("symbol " + req.file_containing_symbol(), &out);
      }
      break;
    case rf::ServerReflectionRequest::kFileContainingExtension: {
      const auto& x = req.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(x.containing_type());
      const auto* ext = type ? pool->FindExtensionByNumber(type, x.extension_number()) : nullptr;
      if (ext) {
        AddFile(ext->file(), &seen, out.mutable_file_descriptor_response());
      } else {
        NotFound("extension " + std::to_string(x.extension_number()) + " of " + x.containing_type(), &out);
      }
      break;
    }
    case rf::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type = pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
      if (!type) {
        NotFound("type " + req.all_extension_numbers_of_type(), &out);
        break;
      }
      std::vector<const pb::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* r = out.mutable_all_extension_numbers_response();
      r->set_base_type_name(type->full_name());
      for (const auto* e : extensions) r->add_extension_number(e->number());
      break;
    }
    case rf::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET: {
      auto* e = out.mutable_error_response();
      e->set_error_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      e->set_error_message("a reflection request must ask something (list_services, file_containing_symbol, ...)");
      break;
    }
  }
  return out;
}

grpc::Status ReflectionService::ServerReflectionInfo(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<rf::ServerReflectionResponse, rf::ServerReflectionRequest>* stream) {
  if (auto a = admit_(ctx); !a.ok()) return a;
  struct Slot {
    std::atomic<int>& n;
    ~Slot() { --n; }
  } slot{streams_};
  if (++streams_ > kMaxReflectionStreams) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many reflection streams on this process (at most " +
                            std::to_string(kMaxReflectionStreams) + "): close some");
  }
  rf::ServerReflectionRequest req;
  while (stream->Read(&req)) {
    if (!stream->Write(Answer(req))) break;
  }
  return grpc::Status::OK;
}

}  // namespace scdino::control
