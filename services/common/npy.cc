#include "common/npy.h"

#include <torch/torch.h>

#include <cstring>
#include <limits>
#include <regex>
#include <sstream>

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

Status WriteNpy(const std::string& path, const torch::Tensor& t) {
  const char* descr = Descr(t.scalar_type());
  if (descr == nullptr) {
    return Status::InvalidArgument(path + ": .npy output supports float32, float64, int32 and int64, got " +
                                   std::string(c10::toString(t.scalar_type())));
  }
  auto c = t.detach().to(torch::kCPU).contiguous();
  std::ostringstream shape;
  shape << "(";
  for (int64_t i = 0; i < c.dim(); ++i) shape << c.size(i) << (c.dim() == 1 || i + 1 < c.dim() ? "," : "");
  shape << ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape.str() + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out += header;
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return WriteFileAtomic(path, out);
}

StatusOr<torch::Tensor> ReadNpy(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const std::string& b = *bytes;
  auto bad = [&](const std::string& why) { return Status::DataLoss(path + ": not a readable .npy file: " + why); };
  if (b.size() < 10 || b.compare(0, 6, kMagic, 6) != 0) return bad("the magic string \\x93NUMPY is missing");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return bad("truncated header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return bad("version " + std::to_string(major) + " (expected 1, 2 or 3)");
  }
  if (b.size() < offset + header_len) return bad("truncated header");
  const std::string header = b.substr(offset, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|>]?[a-z][0-9]+)'"))) return bad("no 'descr'");
  std::string descr = m[1];
  torch::ScalarType dtype;
  if (descr == "<f4" || descr == "f4") dtype = torch::kFloat32;
  else if (descr == "<f8" || descr == "f8") dtype = torch::kFloat64;
  else if (descr == "<i4" || descr == "i4") dtype = torch::kInt32;
  else if (descr == "<i8" || descr == "i8") dtype = torch::kInt64;
  else return bad("dtype '" + descr + "' (expected <f4, <f8, <i4 or <i8)");
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True"))) return bad("Fortran order is not supported");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([0-9,\\s]*)\\)"))) return bad("no 'shape'");
  // Every dimension is checked, and so is their product, before anything is
  // allocated: a corrupt or hostile header must not overflow or throw.
  std::vector<int64_t> shape;
  std::stringstream dims(m[1].str());
  size_t numel = 1;
  bool overflow = false, has_zero = false;
  for (std::string part; std::getline(dims, part, ',');) {
    const auto first = part.find_first_not_of(" \t\n");
    if (first == std::string::npos) continue;
    const std::string digits = part.substr(first, part.find_last_not_of(" \t\n") - first + 1);
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return bad("dimension '" + digits + "' is not a size");
    }
    const auto dim = static_cast<size_t>(std::stoll(digits));  // 1 to 18 digits: always fits
    shape.push_back(static_cast<int64_t>(dim));
    if (dim == 0) has_zero = true;
    else if (numel > std::numeric_limits<size_t>::max() / dim) overflow = true;
    else numel *= dim;
  }
  if (has_zero) numel = 0, overflow = false;
  const size_t esize = torch::elementSize(dtype);
  if (numel > std::numeric_limits<size_t>::max() / esize) overflow = true;
  const size_t data = offset + header_len;
  const size_t have = b.size() - data;
  if (overflow || numel > have / esize || numel * esize != have) {
    return bad("the shape needs " + (overflow ? std::string("more than 2^64") : std::to_string(numel * esize)) +
               " data bytes, the file has " + std::to_string(have));
  }
  const size_t want = numel * esize;
  auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  if (want > 0) std::memcpy(t.data_ptr(), b.data() + data, want);
  return t;
}

}  // namespace scdino
