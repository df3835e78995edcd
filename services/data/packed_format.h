// The pieces of the packed format (data/packed.h) that its reader
// (packed.cc), its writer (pack_writer.cc) and the staging of a set on a
// node (staging.cc) share: checksums, names, the tar and .npy encodings,
// the pack order. Internal to the data layer; pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_io.h"

namespace scdino::data::pack_format {

/// pack.json's "format"; a set of another version is refused.
constexpr int kFormatVersion = 1;

/// zlib's CRC-32 (as Python's zlib.crc32), continued from `crc`.
uint32_t Crc32(const char* data, size_t n, uint32_t crc = 0);
/// uint8, uint16 (ReadImage widens 16-bit samples to int32) or float32.
std::string DtypeName(const torch::Tensor& t);
/// The raw H x W x C image as a .npy member: '|u1', '<u2' or '<f4', C order.
std::string EncodeNpy(const RawImage& hwc);
/// One POSIX ustar header block for a regular file of `size` bytes.
std::string TarHeader(const std::string& name, int64_t size);
/// The zeros that end a tar member of `size` bytes on a 512-byte block.
std::string Padding(int64_t size);
/// shard-NNNNN (five digits or more).
std::string ShardName(int64_t s);
bool IsShardName(const std::string& name);
/// A member's key: its position in the pack order, 9 digits.
std::string Key(int64_t position);
/// A CRC-32 as 8 lowercase hex digits, and back (std::invalid_argument).
std::string Hex32(uint32_t v);
uint32_t ParseHex32(const std::string& s);
/// `path` relative to the data set's root, with '/'.
std::string Relative(const Dataset& d, const std::string& path);
/// The pack order: a seeded permutation of the sorted entries.
std::vector<int64_t> PackOrder(int64_t n, uint64_t seed);

}  // namespace scdino::data::pack_format
