// Hostile and damaged .npy and safetensors files (as tests/data/image_io_test
// does for TIFFs): truncations, flipped bytes and headers whose numbers are
// out of every range. Nothing may throw or abort; every refusal names the
// file and says what is wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "common/array_bytes.h"
#include "common/files.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "support/damage.h"
#include "support/test_support.h"

namespace scdino {
namespace {

const char* kHostileNumbers[] = {"-1",  "0", "18446744073709551615", "9223372036854775807", "4611686018427387904",
                                 "1e30", "99999999999999999999999", "3.5", "\"7\"", "null", "[]", "{}", "-9223372036854775808"};

// The header text with its k-th integer replaced by `with`; empty when it
// has fewer integers.
std::string ReplaceNumber(const std::string& header, int k, const std::string& with) {
  const std::regex number("[0-9]+");
  int i = 0;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), number); it != std::sregex_iterator(); ++it, ++i) {
    if (i == k) {
      const auto at = static_cast<size_t>(it->position());
      return header.substr(0, at) + with + header.substr(at + static_cast<size_t>(it->length()));
    }
  }
  return "";
}

std::string SafetensorsWithHeader(const std::string& header, const std::string& data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

// The one size check every reader uses: zeros make an array empty, but the
// other sides must still fit together (a tensor's strides multiply them).
TEST(ArrayBytes, OverflowsAndNegativeSidesAreRefusedZerosAreEmpty) {
  EXPECT_EQ(ArrayBytes({2, 3, 4}, 4), 96u);
  EXPECT_EQ(ArrayBytes({}, 8), 8u);
  EXPECT_EQ(ArrayBytes({5, 0}, 4), 0u);
  EXPECT_EQ(ArrayBytes({int64_t{1} << 31, int64_t{1} << 31}, 1), uint64_t{1} << 62);
  EXPECT_FALSE(ArrayBytes({int64_t{1} << 32, int64_t{1} << 32, 0}, 4));
  EXPECT_FALSE(ArrayBytes({int64_t{1} << 31, int64_t{1} << 31}, 2));  // 2^63 bytes
  EXPECT_FALSE(ArrayBytes({3, -1}, 1));
  EXPECT_EQ(ShapeText({2, 3}), "(2, 3)");
}

TEST(Fuzz, DamagedAndHostileSafetensorsNeverThrow) {
  TensorMap t{{"w", torch::randn({3, 4})}, {"u", torch::arange(6, torch::kInt64).reshape({2, 3})}};
  const std::string bytes = SerializeSafetensors(t, {{"iteration", "12"}, {"classes", "[\"a\",\"b\"]"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  const std::string header = bytes.substr(8, n), data = bytes.substr(8 + n);
  std::vector<std::string> cases = testing::Damaged(bytes, 8 + n, 7, 60);
  for (int k = 0;; ++k) {
    if (ReplaceNumber(header, k, "0").empty()) break;
    for (const char* h : kHostileNumbers) cases.push_back(SafetensorsWithHeader(ReplaceNumber(header, k, h), data));
  }
  cases.push_back(SafetensorsWithHeader(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 0, -3], "data_offsets": [0, 0]}})", ""));
  cases.push_back(SafetensorsWithHeader(R"({"x": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", ""));
  // The issue's 100-byte checkpoint: an empty tensor whose other sides
  // overflow its strides.
  cases.push_back(SafetensorsWithHeader(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", ""));
  cases.push_back(SafetensorsWithHeader(R"({"x": {"dtype": "U16", "shape": [9223372036854775807, 0], "data_offsets": [0, 0]}})", ""));
  cases.push_back(SafetensorsWithHeader(R"({"x": 5})", ""));
  cases.push_back(SafetensorsWithHeader(R"([1, 2])", ""));
  cases.push_back(SafetensorsWithHeader(R"({"__metadata__": {"a": 5}})", ""));
  int rejected = 0;
  testing::ScratchDir dir;
  const std::string path = dir.file("fuzz.safetensors");
  for (const auto& c : cases) {
    StatusOr<SafetensorsFile> r = Status::Internal("not run");
    ASSERT_NO_THROW(r = ParseSafetensors(c, "fuzz.safetensors"));
    if (!r.ok()) {
      ++rejected;
      EXPECT_NE(r.status().message().find("fuzz.safetensors"), std::string::npos) << r.status().message();
    }
    // The metadata reader (a checkpoint listing) over the same file.
    ASSERT_TRUE(WriteFileAtomic(path, c).ok());
    StatusOr<Metadata> m = Status::Internal("not run");
    ASSERT_NO_THROW(m = ReadSafetensorsMetadata(path));
    if (!m.ok()) {
      EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
    }
  }
  EXPECT_GT(rejected, static_cast<int>(cases.size()) / 2);
}

TEST(Fuzz, DamagedAndHostileNpyNeverThrow) {
  testing::ScratchDir dir;
  const std::string path = dir.file("f.npy");
  ASSERT_TRUE(WriteNpy(path, torch::randn({5, 3})).ok());
  const std::string bytes = *ReadFile(path);
  std::vector<std::string> cases = testing::Damaged(bytes, 128, 11, 60);
  const std::string header_start = bytes.substr(0, 10);
  for (const std::string shape :
       {"(99999999999999999999,)", "(-1,)", "(4611686018427387904, 4)", "(1 2,)", "()", "(0, 99999999999999999)",
        "(4294967296, 4294967296, 4294967296)", "(5, 3, 0)", "(15,)", "(,,)", "(5, x)", "(4294967296, 4294967296, 0)",
        "(999999999999999999, 999999999999999999, 0)"}) {
    std::string b = bytes;
    const auto at = b.find("(5,3)");
    ASSERT_NE(at, std::string::npos) << b.substr(0, 64);
    b.replace(at, 5, shape);
    cases.push_back(b);
  }
  int rejected = 0, read = 0;
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << c;
    StatusOr<torch::Tensor> r = Status::Internal("not run");
    ASSERT_NO_THROW(r = ReadNpy(path));
    if (r.ok()) {
      ++read;
      EXPECT_EQ(r->numel(), 15);
    } else {
      ++rejected;
      EXPECT_NE(r.status().message().find("f.npy"), std::string::npos) << r.status().message();
    }
  }
  EXPECT_GT(rejected, static_cast<int>(cases.size()) / 2);
  EXPECT_GE(read, 1) << "(15,) describes the same 15 floats";
}

}  // namespace
}  // namespace scdino
