#include "data/packed_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/fingerprint.h"
#include "common/npy.h"
#include "data/sampler.h"

namespace scdino::data::pack_format {

namespace fs = std::filesystem;

uint32_t Crc32(const char* data, size_t n, uint32_t crc) {
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(data), piece));
    data += piece;
    n -= piece;
  }
  return crc;
}

std::string DtypeName(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kUInt8) return "uint8";
  if (t.scalar_type() == torch::kInt32) return "uint16";  // ReadImage widens 16-bit samples
  return "float32";
}

// The raw image as a .npy file: '|u1', '<u2' or '<f4', C order, H x W x C.
std::string EncodeNpy(const RawImage& hwc) {
  const std::string dtype = DtypeName(hwc);
  const std::string descr = dtype == "uint8" ? "|u1" : dtype == "uint16" ? "<u2" : "<f4";
  std::string out = NpyHeader(descr, hwc.sizes().vec());
  auto c = hwc.contiguous();
  if (dtype == "uint16") {
    auto u = c.to(torch::kInt32);
    const int32_t* p = u.data_ptr<int32_t>();
    const size_t off = out.size();
    out.resize(off + 2 * static_cast<size_t>(u.numel()));
    for (int64_t i = 0; i < u.numel(); ++i) {
      const uint16_t v = static_cast<uint16_t>(p[i]);
      out[off + 2 * i] = static_cast<char>(v & 0xff);
      out[off + 2 * i + 1] = static_cast<char>(v >> 8);
    }
  } else {
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * c.element_size()));
  }
  return out;
}

// One tar header block (POSIX ustar) for a regular file.
std::string TarHeader(const std::string& name, int64_t size) {
  std::string h(512, '\0');
  auto put = [&](size_t at, size_t width, const std::string& s) { std::memcpy(&h[at], s.data(), std::min(width, s.size())); };
  auto octal = [](int64_t v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*llo", digits, static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  put(0, 100, name);
  put(100, 8, octal(0644, 7));
  put(108, 8, octal(0, 7));
  put(116, 8, octal(0, 7));
  put(124, 12, octal(size, 11));
  put(136, 12, octal(0, 11));
  put(148, 8, "        ");
  h[156] = '0';
  put(257, 6, std::string("ustar\0", 6));
  put(263, 2, "00");
  unsigned sum = 0;
  for (unsigned char ch : h) sum += ch;
  put(148, 8, octal(sum, 6) + std::string("\0 ", 2));
  return h;
}

std::string Padding(int64_t size) { return std::string(static_cast<size_t>((512 - size % 512) % 512), '\0'); }

std::string ShardName(int64_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05lld", static_cast<long long>(s));
  return buf;
}

std::string Key(int64_t position) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%09lld", static_cast<long long>(position));
  return buf;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

uint32_t ParseHex32(const std::string& s) { return static_cast<uint32_t>(std::stoul(s, nullptr, 16)); }

// shard-NNNNN.tar (five digits or more), as PackDataset names shards.
bool IsShardName(const std::string& name) {
  const std::string head = "shard-", tail = ".tar";
  if (name.size() < head.size() + 5 + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return false;
  }
  for (size_t i = head.size(); i < name.size() - tail.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

std::string Relative(const Dataset& d, const std::string& path) {
  return fs::path(path).lexically_relative(d.root).generic_string();
}

// The pack order: a seeded permutation of the sorted entries.
std::vector<int64_t> PackOrder(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(MixSeed({seed, 0x9acdull}));
  for (int64_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[i], order[pick(rng)]);
  }
  return order;
}

}  // namespace scdino::data::pack_format
