#include "common/safetensors.h"

#include <gtest/gtest.h>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino {
namespace {

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TensorMap in{{"a.f32", torch::randn({2, 3})},
               {"b.f64", torch::randn({4}, torch::kFloat64)},
               {"c.bf16", torch::randn({3, 1}).to(torch::kBFloat16)},
               {"d.f16", torch::randn({5}).to(torch::kFloat16)},
               {"e.i64", torch::arange(7)},
               {"f.i32", torch::arange(3, torch::kInt32)},
               {"g.u8", torch::arange(200, 256).to(torch::kUInt8)},
               {"h.bool", torch::tensor({true, false, true})},
               {"i.empty", torch::zeros({0, 4})},
               {"j.scalar", torch::tensor(2.5)},
               {"k.noncontig", torch::randn({4, 5}).t()}};
  Metadata meta{{"epoch", "3"}, {"config", "{\"x\": 1}"}};
  auto bytes = SerializeSafetensors(in, meta);
  auto out = ParseSafetensors(bytes, "mem");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->metadata, meta);
  ASSERT_EQ(out->tensors.size(), in.size());
  for (const auto& [k, v] : in) {
    const auto& got = out->tensors.at(k);
    EXPECT_EQ(got.scalar_type(), v.scalar_type()) << k;
    EXPECT_TRUE(got.equal(v.contiguous())) << k;
  }
}

TEST(Safetensors, ReadsReferenceFixture) {
  auto f = ReadSafetensors(testing::SharedDir() + "/reference/dino-parity/weights.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors.at("backbone.cls_token").dim(), 3);
  EXPECT_EQ(f->tensors.at("head.last_layer.weight_g").size(1), 1);
  EXPECT_FALSE(f->metadata.empty());
  auto u16 = ReadSafetensors(testing::SharedDir() + "/reference/tiff-layouts/expected.safetensors");
  ASSERT_TRUE(u16.ok()) << u16.status().ToString();
  // U16 widens to int32, values kept.
  EXPECT_EQ(u16->tensors.at("contig_u16").scalar_type(), torch::kInt32);
  EXPECT_GE(u16->tensors.at("contig_u16").min().item<int>(), 0);
}

TEST(Safetensors, CorruptBytesGiveErrorsNamingTheFile) {
  auto bytes = SerializeSafetensors({{"w", torch::randn({8, 8})}}, {{"k", "v"}});
  // Every truncation is rejected with a DataLoss naming the origin.
  for (size_t n = 0; n < bytes.size(); n += 7) {
    auto r = ParseSafetensors(std::string_view(bytes).substr(0, n), "ckpt.safetensors");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("ckpt.safetensors"), std::string::npos);
  }
  // Flipped header bytes never crash.
  for (size_t i = 8; i < 60 && i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 0x5a);
    auto r = ParseSafetensors(b, "x");
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    }
  }
  std::string huge = bytes;
  huge[7] = static_cast<char>(0x7f);
  EXPECT_FALSE(ParseSafetensors(huge, "x").ok());
}

// The format's 8-byte little-endian header length.
std::string LengthPrefix(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

std::string WithHeader(const std::string& header, const std::string& data) {
  return LengthPrefix(header.size()) + header + data;
}

// The tensors must tile the data section: a header whose tensors all point
// at the same megabyte would have each of them copied from it (a 100 MiB
// header over 1 MiB of data: about 1.4 TiB allocated). Overlaps, gaps and
// trailing bytes are refused naming the tensor and the offsets; tensors
// stored in another order than the header lists them are read.
TEST(Safetensors, DataOffsetsMustTileTheDataSectionWithoutOverlap) {
  const std::string mib(1 << 20, '\0');
  std::string header = "{";
  for (int i = 0; i < 64; ++i) {
    header += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
              R"(": {"dtype": "U8", "shape": [1048576], "data_offsets": [0, 1048576]})";
  }
  auto same = ParseSafetensors(WithHeader(header + "}", mib), "same.safetensors");
  ASSERT_FALSE(same.ok()) << "64 tensors over one megabyte";
  EXPECT_NE(same.status().message().find("same.safetensors"), std::string::npos);
  EXPECT_NE(same.status().message().find("[0, 1048576] overlap the tensor before it, which ends at 1048576"),
            std::string::npos)
      << same.status().message();

  const std::string two = R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [%A]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [%B]}})";
  auto with = [&](const std::string& a, const std::string& b, size_t data_bytes) {
    std::string h = two;
    h.replace(h.find("%A"), 2, a);
    h.replace(h.find("%B"), 2, b);
    return ParseSafetensors(WithHeader(h, std::string(data_bytes, '\7')), "two.safetensors");
  };
  auto overlap = with("0, 4", "2, 6", 8);
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("tensor 'b': data_offsets [2, 6] overlap"), std::string::npos)
      << overlap.status().message();
  auto gap = with("0, 4", "6, 10", 10);
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("leave a gap after the tensor before it, which ends at 4"), std::string::npos)
      << gap.status().message();
  auto trailing = with("0, 4", "4, 8", 12);
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("data ends at byte 8 of a 12-byte data section"), std::string::npos)
      << trailing.status().message();
  auto reversed = with("4, 8", "0, 4", 8);
  ASSERT_TRUE(reversed.ok()) << reversed.status().ToString();
  EXPECT_EQ(reversed->tensors.size(), 2u);
}

TEST(Safetensors, WriteReadFile) {
  testing::ScratchDir dir;
  const std::string path = dir.file("w.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", torch::ones({3})}}).ok());
  auto r = ReadSafetensors(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->tensors.at("x").equal(torch::ones({3})));
  auto missing = ReadSafetensors(dir.file("nope.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.safetensors"), std::string::npos);
}

// The metadata alone, as a checkpoint listing reads it from every file of a
// run directory: a damaged file is refused naming it and what is wrong, and
// a header length past the file's end is refused before anything is
// allocated for it.
TEST(Safetensors, MetadataReaderRefusesDamagedFilesNamingThem) {
  testing::ScratchDir dir;
  const std::string path = dir.file("checkpoint.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", torch::ones({3})}}, {{"iteration", "7"}, {"epoch", "1"}}).ok());
  auto meta = ReadSafetensorsMetadata(path);
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_EQ(*meta, (Metadata{{"iteration", "7"}, {"epoch", "1"}}));
  EXPECT_EQ(ReadSafetensorsMetadata(dir.file("nope.safetensors")).status().code(), StatusCode::kNotFound);
  const std::pair<std::string, std::string> damaged[] = {
      {"abc", "shorter than the 8-byte header length (3 bytes)"},
      // 100 MiB claimed by a 20-byte file.
      {LengthPrefix(100u << 20) + "{\"a\": 1}    ", "header length 104857600 exceeds the file (20 bytes)"},
      {WithHeader("{\"__metadata__\": ", ""), "the header is not JSON"},
      {WithHeader("[1, 2]", ""), "the header is not a JSON object"},
      {WithHeader("{\"__metadata__\": [\"a\"]}", ""), "__metadata__ is not an object"},
  };
  for (const auto& [bytes, what] : damaged) {
    ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
    auto r = ReadSafetensorsMetadata(path);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << what;
    EXPECT_NE(r.status().message().find(path + ": not a valid safetensors file: " + what), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace scdino
