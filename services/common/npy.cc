#include "common/npy.h"

#include <torch/torch.h>

#include <cstring>
#include <limits>
#include <sstream>

#include "common/array_bytes.h"
#include "common/files.h"

namespace scdino {

namespace {

constexpr char kMagic[] = "\x93NUMPY";

const char* Descr(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "<f4";
    case torch::kFloat64: return "<f8";
    case torch::kInt32: return "<i4";
    case torch::kInt64: return "<i8";
    default: return nullptr;
  }
}

}  // namespace

std::string NpyHeader(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string dims = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  }
  dims += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + dims + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  return out + header;
}

namespace {

// The value after `key` in a Python dict literal, from its first
// non-blank character; npos when the key is absent.
size_t ValueOf(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return at;
  size_t p = header.find(':', at);
  if (p == std::string::npos) return p;
  return header.find_first_not_of(" \t", p + 1);
}

}  // namespace

StatusOr<NpyLayout> ParseNpyHeader(const char* data, size_t size, const std::string& where) {
  auto bad = [&](const std::string& why) { return Status::DataLoss(where + ": not a readable .npy file: " + why); };
  if (size < 10 || std::memcmp(data, kMagic, 6) != 0) return bad("the magic string \\x93NUMPY is missing");
  const auto* b = reinterpret_cast<const unsigned char*>(data);
  const int major = b[6];
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = b[8] | (static_cast<size_t>(b[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return bad("truncated header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(b[8 + i]) << (8 * i);
    offset = 12;
  } else {
    return bad("version " + std::to_string(major) + " (expected 1, 2 or 3)");
  }
  if (size - offset < header_len) return bad("truncated header");
  const std::string header(data + offset, header_len);
  NpyLayout l;
  l.data_offset = offset + header_len;
  size_t p = ValueOf(header, "descr");
  if (p == std::string::npos || header[p] != '\'') return bad("no 'descr'");
  const size_t close = header.find('\'', p + 1);
  if (close == std::string::npos) return bad("no 'descr'");
  l.descr = header.substr(p + 1, close - p - 1);
  p = ValueOf(header, "fortran_order");
  l.fortran_order = p != std::string::npos && header.compare(p, 4, "True") == 0;
  p = ValueOf(header, "shape");
  if (p == std::string::npos || header[p] != '(') return bad("no 'shape'");
  const size_t end = header.find(')', p);
  if (end == std::string::npos) return bad("no 'shape'");
  // Every dimension is checked before anything is sized from it: a corrupt
  // or hostile header must not overflow or throw.
  std::string part;
  const std::string dims = header.substr(p + 1, end - p - 1) + ",";
  for (char ch : dims) {
    if (ch != ',') {
      if (ch != ' ' && ch != '\t' && ch != '\n') part += ch;
      continue;
    }
    if (part.empty()) continue;
    if (part.size() > 18 || part.find_first_not_of("0123456789") != std::string::npos) {
      return bad("dimension '" + part + "' is not a size");
    }
    l.shape.push_back(std::stoll(part));  // 1 to 18 digits: always fits
    part.clear();
  }
  return l;
}

Status WriteNpy(const std::string& path, const torch::Tensor& t) {
  const char* descr = Descr(t.scalar_type());
  if (descr == nullptr) {
    return Status::InvalidArgument(path + ": .npy output supports float32, float64, int32 and int64, got " +
                                   std::string(c10::toString(t.scalar_type())));
  }
  auto c = t.detach().to(torch::kCPU).contiguous();
  std::string out = NpyHeader(descr, c.sizes().vec());
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return WriteFileAtomic(path, out);
}

StatusOr<torch::Tensor> ReadNpy(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const std::string& b = *bytes;
  auto layout = ParseNpyHeader(b.data(), b.size(), path);
  if (!layout.ok()) return layout.status();
  auto bad = [&](const std::string& why) { return Status::DataLoss(path + ": not a readable .npy file: " + why); };
  const std::string& descr = layout->descr;
  torch::ScalarType dtype;
  if (descr == "<f4" || descr == "f4") dtype = torch::kFloat32;
  else if (descr == "<f8" || descr == "f8") dtype = torch::kFloat64;
  else if (descr == "<i4" || descr == "i4") dtype = torch::kInt32;
  else if (descr == "<i8" || descr == "i8") dtype = torch::kInt64;
  else return bad("dtype '" + descr + "' (expected <f4, <f8, <i4 or <i8)");
  if (layout->fortran_order) return bad("Fortran order is not supported");
  const size_t esize = torch::elementSize(dtype);
  const auto want = ArrayBytes(layout->shape, esize);
  const size_t data = layout->data_offset;
  const size_t have = b.size() - data;
  if (!want || *want != have) {
    return bad("the shape " + ShapeText(layout->shape) + " needs " +
               (want ? std::to_string(*want) : std::string("more than 2^63")) + " data bytes, the file has " +
               std::to_string(have));
  }
  auto t = torch::empty(layout->shape, torch::TensorOptions().dtype(dtype));
  if (*want > 0) std::memcpy(t.data_ptr(), b.data() + data, *want);
  return t;
}

}  // namespace scdino
