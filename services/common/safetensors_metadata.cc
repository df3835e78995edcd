#include "common/safetensors_metadata.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace scdino {

using nlohmann::json;

StatusOr<Metadata> ReadSafetensorsMetadata(const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Status::DataLoss(path + ": not a valid safetensors file: " + what);
  };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound(path + ": cannot open");
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
  in.seekg(0);
  unsigned char len[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(len), 8)) {
    return bad("shorter than the 8-byte header length (" + std::to_string(size) + " bytes)");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  // Bounded by the file itself before anything is allocated: a damaged or
  // hostile length costs nothing (a checkpoint listing reads every file).
  if (n > kSafetensorsMaxHeader || n > size - 8) {
    return bad("header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size) + " bytes)");
  }
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return bad("truncated header");
  Metadata m;
  try {
    const json j = json::parse(header);
    if (!j.is_object()) return bad("the header is not a JSON object");
    const auto it = j.find("__metadata__");
    if (it == j.end()) return m;
    if (!it->is_object()) return bad("__metadata__ is not an object");
    for (const auto& [key, value] : it->items()) {
      if (value.is_string()) m[key] = value.get<std::string>();
    }
  } catch (const std::exception& e) {
    return bad(std::string("the header is not JSON: ") + e.what());
  }
  return m;
}

}  // namespace scdino
