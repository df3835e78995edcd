// A little-endian TIFF written tag by tag, for the files no tool would write:
// headers that claim more than the file holds, subsampled YCbCr tiles.
// One page; values that do not fit in an entry go after the directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scdino::testing {

struct TiffTag {
  uint16_t tag;
  uint16_t type;  ///< 3 SHORT, 4 LONG, 5 RATIONAL (values in pairs)
  std::vector<uint32_t> values;
};

/// The file's bytes: header, one directory of `tags` (sorted by the caller),
/// out-of-line values, then `data` (at TinyTiffDataOffset(tags)).
inline std::string TinyTiff(const std::vector<TiffTag>& tags, const std::string& data = "") {
  auto put16 = [](std::string& s, uint32_t v) { s += char(v & 0xff), s += char((v >> 8) & 0xff); };
  auto put32 = [&](std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); };
  std::string head = "II", dir, extra;
  put16(head, 42);
  put32(head, 8);
  const uint32_t extra_at = 8 + 2 + 12 * static_cast<uint32_t>(tags.size()) + 4;
  put16(dir, static_cast<uint32_t>(tags.size()));
  for (const auto& t : tags) {
    const uint32_t size = t.type == 3 ? 2 : 4;
    std::string v;
    for (uint32_t x : t.values) size == 2 ? put16(v, x) : put32(v, x);
    put16(dir, t.tag);
    put16(dir, t.type);
    put32(dir, static_cast<uint32_t>(t.values.size() / (t.type == 5 ? 2 : 1)));
    if (v.size() <= 4) {
      dir += v + std::string(4 - v.size(), '\0');
    } else {
      put32(dir, extra_at + static_cast<uint32_t>(extra.size()));
      extra += v;
    }
  }
  put32(dir, 0);  // no next page
  return head + dir + extra + data;
}

/// Where TinyTiff(tags, data) puts `data`.
inline uint32_t TinyTiffDataOffset(const std::vector<TiffTag>& tags) {
  uint32_t extra = 0;
  for (const auto& t : tags) {
    const uint32_t bytes = (t.type == 3 ? 2 : 4) * static_cast<uint32_t>(t.values.size());
    if (bytes > 4) extra += bytes;
  }
  return 8 + 2 + 12 * static_cast<uint32_t>(tags.size()) + 4 + extra;
}

/// The 16 x 16 8-bit TIFF whose one tile claims to be
/// `tile` x `tile` (a 1,048,576-pixel side asks for a terabyte).
inline std::string TiffClaimingAHugeTile(uint32_t tile = 1u << 20) {
  std::vector<TiffTag> tags = {{256, 4, {16}}, {257, 4, {16}}, {258, 3, {8}}, {259, 3, {1}}, {262, 3, {1}},
                               {277, 3, {1}},  {322, 4, {tile}}, {323, 4, {tile}}, {324, 4, {0}}, {325, 4, {256}}};
  tags[8].values[0] = TinyTiffDataOffset(tags);
  return TinyTiff(tags, std::string(256, '\x7f'));
}

}  // namespace scdino::testing
