#include "common/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/array_bytes.h"
#include "common/files.h"

namespace scdino {
namespace {

using nlohmann::json;

struct DtypeName {
  const char* name;
  torch::Dtype dtype;
};

// The U16 type has no LibTorch dtype in 1.13; it is widened to I32 on read.
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
    {"BF16", torch::kBFloat16}, {"I64", torch::kInt64}, {"I32", torch::kInt32},
    {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
};

const char* NameOf(torch::Dtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  return nullptr;
}

}  // namespace

std::string SerializeSafetensors(const TensorMap& tensors, const Metadata& metadata) {
  json header = json::object();
  std::vector<torch::Tensor> parts;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const char* dname = NameOf(t.scalar_type());
    if (dname == nullptr) {
      ThrowIfError(Status::InvalidArgument("safetensors: tensor '" + name + "' has dtype " +
                                           std::string(c10::toString(t.scalar_type())) +
                                           ", which the format writer does not support"));
    }
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    uint64_t nbytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dname}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    parts.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // keeps the data 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& c : parts) {
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
  }
  return out;
}

namespace {

Status NotSafetensors(const std::string& origin, const std::string& what) {
  return Status::DataLoss(origin + ": not a valid safetensors file: " + what);
}

Status CheckTiling(const json& header, std::string_view data, const std::string& origin) {
  auto bad = [&](const std::string& what) { return NotSafetensors(origin, what); };
  // The tensors tile the data section exactly, in some order, as the format
  // requires: sorted by offset, each starting where the one before ends, the
  // last at the section's end. Overlapping ranges would let a large header
  // over little data make each tensor a copy of the same bytes.
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json* offs = it.value().is_object() && it.value().contains("data_offsets") ? &it.value()["data_offsets"] : nullptr;
    if (!offs || !offs->is_array() || offs->size() != 2 || !(*offs)[0].is_number_unsigned() ||
        !(*offs)[1].is_number_unsigned() || (*offs)[0].get<uint64_t>() > (*offs)[1].get<uint64_t>() ||
        (*offs)[1].get<uint64_t>() > data.size()) {
      return bad("tensor '" + it.key() + "': data_offsets is not [begin, end] within the " +
                 std::to_string(data.size()) + "-byte data section");
    }
    ranges.push_back({{(*offs)[0].get<uint64_t>(), (*offs)[1].get<uint64_t>()}, it.key()});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [range, name] : ranges) {
    if (range.first != covered) {
      return bad("tensor '" + name + "': data_offsets [" + std::to_string(range.first) + ", " +
                 std::to_string(range.second) + "] " + (range.first < covered ? "overlap" : "leave a gap after") +
                 " the tensor before it, which ends at " + std::to_string(covered));
    }
    covered = range.second;
  }
  if (covered != data.size()) {
    return bad("the tensors' data ends at byte " + std::to_string(covered) + " of a " + std::to_string(data.size()) +
               "-byte data section");
  }
  return Status::Ok();
}

// One tensor, its size checked against its dtype and shape before anything
// is allocated, without overflow: a hostile header must not throw.
StatusOr<torch::Tensor> ReadTensor(const std::string& name, const json& v, std::string_view data,
                                   const std::string& origin) {
  auto bad = [&](const std::string& what) { return NotSafetensors(origin, what); };
  try {
    const std::string dname = v.at("dtype").get<std::string>();
    std::vector<int64_t> shape = v.at("shape").get<std::vector<int64_t>>();
    auto offs = v.at("data_offsets").get<std::vector<uint64_t>>();
    if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data.size()) {
      return bad("tensor '" + name + "': data_offsets outside the " + std::to_string(data.size()) + "-byte data section");
    }
    bool u16 = dname == "U16";
    torch::Dtype dtype = torch::kFloat32;
    bool known = u16;
    for (const auto& e : kDtypes)
      if (dname == e.name) { dtype = e.dtype; known = true; }
    if (!known) return bad("tensor '" + name + "': unsupported dtype " + dname);
    const uint64_t bytes_given = offs[1] - offs[0];
    const uint64_t esize = u16 ? 2 : torch::elementSize(dtype);
    const auto want = ArrayBytes(shape, esize);
    if (!want || *want != bytes_given) {
      return bad("tensor '" + name + "': " + std::to_string(bytes_given) + " bytes for shape " + ShapeText(shape) +
                 " of " + dname + (want ? " (" + std::to_string(*want) + " bytes)" : " (more than 2^63 bytes)"));
    }
    const uint64_t numel = esize == 0 ? 0 : *want / esize;
    const char* src = data.data() + offs[0];
    torch::Tensor t;
    if (u16) {
      t = torch::empty(shape, torch::kInt32);
      auto* dst = t.data_ptr<int32_t>();
      for (uint64_t i = 0; i < numel; ++i) {
        uint16_t x;
        std::memcpy(&x, src + 2 * i, 2);
        dst[i] = x;
      }
    } else {
      t = torch::empty(shape, dtype);
      if (numel > 0) std::memcpy(t.data_ptr(), src, offs[1] - offs[0]);
    }
    return t;
  } catch (const json::exception& e) {
    return bad("tensor '" + name + "': " + e.what());
  } catch (const std::exception& e) {  // the allocation itself (memory)
    return bad("tensor '" + name + "': " + e.what());
  }
}

}  // namespace

StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& origin) {
  auto bad = [&](const std::string& what) { return NotSafetensors(origin, what); };
  if (bytes.size() < 8) return bad("shorter than the 8-byte header length (" + std::to_string(bytes.size()) + " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  if (n > kSafetensorsMaxHeader || n > bytes.size() - 8) {
    return bad("header length " + std::to_string(n) + " exceeds the file (" + std::to_string(bytes.size()) + " bytes)");
  }
  json header;
  try {
    header = json::parse(bytes.substr(8, n));
  } catch (const std::exception& e) {
    return bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) return bad("header is not a JSON object");
  const std::string_view data = bytes.substr(8 + n);
  if (auto st = CheckTiling(header, data, origin); !st.ok()) return st;
  SafetensorsFile file;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return bad("__metadata__." + m.key() + " is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto t = ReadTensor(name, v, data, origin);
    if (!t.ok()) return t.status();
    file.tensors.emplace(name, std::move(t).value());
  }
  return file;
}

StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSafetensors(*bytes, path);
}

Status WriteSafetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  std::string bytes;
  try {
    bytes = SerializeSafetensors(tensors, metadata);
  } catch (const StatusError& e) {
    return e.status();
  }
  return WriteFileAtomic(path, bytes);
}

}  // namespace scdino
