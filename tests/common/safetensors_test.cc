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

}  // namespace
}  // namespace scdino
