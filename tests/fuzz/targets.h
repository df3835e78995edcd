// The fuzz targets: what each reader of outside bytes must survive. Each
// takes any bytes and returns 0; a crash, a sanitizer report or an
// exception escaping is the finding. Built two ways (tests/fuzz/CMakeLists.txt):
// into one replay program that runs the checked-in corpora and every crash
// input ever found (the test command, in the AddressSanitizer tree), and,
// with clang, into one libFuzzer program per target (scripts/fuzz.sh,
// outside CI).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace scdino::fuzz {

using Target = int (*)(const uint8_t* data, size_t size);

/// A TIFF file (data::ReadImage of a .tif holding the bytes).
int Tiff(const uint8_t* data, size_t size);
/// A PNG file (data::ReadImage of a .png holding the bytes).
int Png(const uint8_t* data, size_t size);
/// A JPEG file (data::ReadImage of a .jpg holding the bytes).
int Jpeg(const uint8_t* data, size_t size);
/// A safetensors file (ParseSafetensors).
int Safetensors(const uint8_t* data, size_t size);
/// A .npy file (ReadNpy).
int Npy(const uint8_t* data, size_t size);
/// A packed set: pack.json, index.csv and one shard, separated by the
/// bytes of kPackedSeparator; every image of a set that opens is read.
int Packed(const uint8_t* data, size_t size);
/// A run config (ParseRunConfig).
int Config(const uint8_t* data, size_t size);

/// Between the files of a Packed input.
inline const std::string kPackedSeparator = "\n@@scdino-fuzz-file@@\n";

/// Whether the reader accepted the last input (decoded, parsed, opened):
/// every seed of a corpus must be, so the corpus covers what is accepted.
bool LastInputAccepted();

/// Removes the directory the targets write their inputs to.
void RemoveScratch();

/// The target of a name (tiff, png, jpeg, safetensors, npy, packed,
/// config); null
/// for another.
Target TargetNamed(const std::string& name);

}  // namespace scdino::fuzz
