#include "common/safetensors_metadata.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace scdino {

using nlohmann::json;

StatusOr<Metadata> ReadSafetensorsMetadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return Status::DataLoss(path + ": shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kSafetensorsMaxHeader) return Status::DataLoss(path + ": safetensors header length " + std::to_string(n) + " too large");
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return Status::DataLoss(path + ": truncated header");
  Metadata m;
  try {
    const json j = json::parse(header);
    if (j.contains("__metadata__")) {
      for (auto it = j["__metadata__"].begin(); it != j["__metadata__"].end(); ++it) {
        if (it.value().is_string()) m[it.key()] = it.value().get<std::string>();
      }
    }
  } catch (const std::exception& e) {
    return Status::DataLoss(path + ": safetensors header is not JSON: " + e.what());
  }
  return m;
}

}  // namespace scdino
