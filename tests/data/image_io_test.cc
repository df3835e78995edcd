#include "data/image_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <random>

#include "common/files.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "support/damage.h"
#include "support/test_support.h"
#include "support/tiny_tiff.h"

namespace scdino::data {
namespace {

std::string Layouts() { return scdino::testing::SharedDir() + "/reference/tiff-layouts"; }

class TiffLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(TiffLayout, DecodesToTheExpectedHwcArray) {
  auto expected = ReadSafetensors(Layouts() + "/expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const auto& want = expected->tensors.at(GetParam());
  auto got = ReadImage(Layouts() + "/" + GetParam() + ".tif");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->sizes(), want.sizes());
  EXPECT_EQ(got->scalar_type(), want.scalar_type());
  EXPECT_TRUE(got->equal(want));
}

INSTANTIATE_TEST_SUITE_P(ReferenceFiles, TiffLayout,
                         ::testing::Values("hwc_default_u8", "contig_u8", "separate_u8", "pages_u8", "contig_u16",
                                           "deflate_u16", "imagej_cyx_u16", "pages_f32", "single_u8"));

// Tiled TIFFs as tifffile writes them (tests/data/tiled-layouts/make.py):
// contiguous and separate planes, 8, 16 and 32 bits, deflate, one page per
// channel; six tiles a plane, the right and bottom ones cut by the edge.
class TiledLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(TiledLayout, DecodesToTheArrayTifffileWrote) {
  const std::string base = std::string(SCDINO_SOURCE_DIR) + "/tests/data/tiled-layouts/" + GetParam();
  auto want = ReadNpy(base + ".npy");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto got = ReadImage(base + ".tif");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->sizes(), want->sizes());
  EXPECT_TRUE(got->to(want->scalar_type()).equal(*want)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(TifffileTiles, TiledLayout,
                         ::testing::Values("tiled_contig_u8", "tiled_contig_u16", "tiled_separate_u16",
                                           "tiled_contig_f32", "tiled_deflate_u8", "tiled_pages_u16"));

// Headers that ask for more than their file can hold are refused before
// anything is allocated: the 162-byte TIFF with a terabyte tile, a
// tile too big for its file though under the image bound, and strips of a
// 30,000 x 30,000 image in a file of a few hundred bytes.
TEST(ImageIo, AHeaderAskingForMoreThanTheFileHoldsIsRefusedNamingTheFile) {
  scdino::testing::ScratchDir dir;
  using scdino::testing::TiffTag;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"terabyte_tile.tif", scdino::testing::TiffClaimingAHugeTile()},
      {"large_tile.tif", scdino::testing::TiffClaimingAHugeTile(16384)},
      {"large_strips.tif", [] {
         std::vector<TiffTag> tags = {{256, 4, {30000}}, {257, 4, {30000}}, {258, 3, {8}},   {259, 3, {1}},
                                      {262, 3, {1}},     {273, 4, {0}},     {277, 3, {1}},   {278, 4, {30000}},
                                      {279, 4, {256}}};
         tags[5].values[0] = scdino::testing::TinyTiffDataOffset(tags);
         return scdino::testing::TinyTiff(tags, std::string(256, '\1'));
       }()}};
  for (const auto& [name, bytes] : files) {
    ASSERT_TRUE(WriteFileAtomic(dir.file(name), bytes).ok());
    auto r = ReadImage(dir.file(name));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find(dir.file(name)), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("more than a " + std::to_string(bytes.size()) + "-byte file can hold"),
              std::string::npos)
        << r.status().message();
  }
}

// An uncompressed tiled YCbCr image with 2 x 2 chroma subsampling: a
// 64 x 64 tile holds 6,144 bytes, not 64 x 64 x 3 = 12,288 (the copy used to
// read past it). It decodes through libtiff's RGBA path, edge tiles
// included: neutral chroma gives grey = luma.
TEST(ImageIo, SubsampledYCbCrTilesDecodeThroughTheRgbaPath) {
  scdino::testing::ScratchDir dir;
  using scdino::testing::TiffTag;
  constexpr uint32_t kW = 80, kH = 72, kTile = 64, kTileBytes = (kTile / 2) * (kTile / 2) * 6;
  std::vector<TiffTag> tags = {{256, 4, {kW}},         {257, 4, {kH}},          {258, 3, {8, 8, 8}},
                               {259, 3, {1}},          {262, 3, {6}},           {277, 3, {3}},
                               {284, 3, {1}},          {322, 4, {kTile}},       {323, 4, {kTile}},
                               {324, 4, {0, 0, 0, 0}}, {325, 4, {kTileBytes, kTileBytes, kTileBytes, kTileBytes}},
                               {530, 3, {2, 2}},
                               // ReferenceBlackWhite (RATIONAL): the full range.
                               {532, 5, {0, 1, 255, 1, 128, 1, 255, 1, 128, 1, 255, 1}}};
  const uint32_t data_at = scdino::testing::TinyTiffDataOffset(tags);
  for (uint32_t t = 0; t < 4; ++t) tags[9].values[t] = data_at + kTileBytes * t;
  auto luma = [](int64_t y, int64_t x) { return static_cast<uint8_t>(16 + 2 * y + x); };
  std::string data;
  for (uint32_t ty = 0; ty < 2; ++ty) {
    for (uint32_t tx = 0; tx < 2; ++tx) {
      for (uint32_t by = 0; by < kTile / 2; ++by) {
        for (uint32_t bx = 0; bx < kTile / 2; ++bx) {  // a 2 x 2 block: four lumas, then Cb and Cr
          for (uint32_t dy = 0; dy < 2; ++dy) {
            for (uint32_t dx = 0; dx < 2; ++dx) data += char(luma(ty * kTile + by * 2 + dy, tx * kTile + bx * 2 + dx));
          }
          data += char(128), data += char(128);
        }
      }
    }
  }
  ASSERT_TRUE(WriteFileAtomic(dir.file("ycbcr.tif"), scdino::testing::TinyTiff(tags, data)).ok());
  auto r = ReadImage(dir.file("ycbcr.tif"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sizes(), (std::vector<int64_t>{kH, kW, 3}));
  auto want = torch::empty({kH, kW}, torch::kInt32);
  for (int64_t y = 0; y < kH; ++y) {
    for (int64_t x = 0; x < kW; ++x) want[y][x] = luma(y, x);
  }
  for (int64_t c = 0; c < 3; ++c) {
    const auto diff = (r->select(2, c).to(torch::kInt32) - want).abs().max().item<int>();
    EXPECT_LE(diff, 1) << "channel " << c;
  }
}

TEST(ImageIo, WriteTiffRoundTrips) {
  scdino::testing::ScratchDir dir;
  auto u8 = torch::randint(0, 256, {7, 9, 4}, torch::kInt32).to(torch::kUInt8);
  ASSERT_TRUE(WriteTiff(dir.file("a.tif"), u8).ok());
  EXPECT_TRUE(ReadImage(dir.file("a.tif"))->equal(u8));
  auto u16 = torch::randint(0, 65536, {5, 6, 3}, torch::kInt32);
  ASSERT_TRUE(WriteTiff(dir.file("b.tiff"), u16, TiffCompression::kDeflate).ok());
  EXPECT_TRUE(ReadImage(dir.file("b.tiff"))->equal(u16));
  ASSERT_TRUE(WriteTiff(dir.file("c.tif"), u8, TiffCompression::kLzw).ok());
  EXPECT_TRUE(ReadImage(dir.file("c.tif"))->equal(u8));
  ASSERT_TRUE(WriteTiff(dir.file("d.tif"), u16, TiffCompression::kLzw).ok());
  EXPECT_TRUE(ReadImage(dir.file("d.tif"))->equal(u16));
}

TEST(ImageIo, PngAndJpegThroughOpenCv) {
  scdino::testing::ScratchDir dir;
  cv::Mat bgr(4, 5, CV_8UC3, cv::Scalar(10, 20, 30));  // B, G, R
  ASSERT_TRUE(cv::imwrite(dir.file("c.png"), bgr));
  auto png = ReadImage(dir.file("c.png"));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->sizes(), (std::vector<int64_t>{4, 5, 3}));
  EXPECT_EQ((*png)[0][0][0].item<int>(), 30) << "RGB order";
  cv::Mat gray(6, 6, CV_8UC1, cv::Scalar(77));
  ASSERT_TRUE(cv::imwrite(dir.file("g.jpg"), gray));
  auto jpg = ReadImage(dir.file("g.jpg"));
  ASSERT_TRUE(jpg.ok());
  EXPECT_NEAR((*jpg)[2][2][0].item<int>(), 77, 2);
}

TEST(ImageIo, ErrorsNameTheFile) {
  scdino::testing::ScratchDir dir;
  auto missing = ReadImage(dir.file("none.tif"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.tif"), std::string::npos);
  std::ofstream(dir.file("text.tif")) << "not a tiff at all";
  auto text = ReadImage(dir.file("text.tif"));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("text.tif"), std::string::npos);
  std::ofstream(dir.file("notes.txt")) << "x";
  EXPECT_FALSE(ReadImage(dir.file("notes.txt")).ok());
  std::ofstream(dir.file("bad.png")) << "garbage";
  EXPECT_EQ(ReadImage(dir.file("bad.png")).status().code(), StatusCode::kDataLoss);
}

// Many truncated and byte-flipped copies of every fixture TIFF go through the
// reader: each either decodes or returns an error; none crashes.
TEST(ImageIo, CorruptAndTruncatedTiffsNeverCrash) {
  scdino::testing::ScratchDir dir;
  uint32_t seed = 1234;
  int decoded = 0, rejected = 0;
  for (const auto& e : std::filesystem::directory_iterator(Layouts())) {
    if (e.path().extension() != ".tif") continue;
    const std::string bytes = *ReadFile(e.path().string());
    for (const std::string& b : scdino::testing::Damaged(bytes, 400, seed++)) {
      const std::string path = dir.file("fuzz.tif");
      std::ofstream(path, std::ios::binary) << b;
      auto r = ReadImage(path);
      if (r.ok()) {
        ++decoded;
        EXPECT_EQ(r->dim(), 3);
      } else {
        ++rejected;
        EXPECT_NE(r.status().message().find("fuzz.tif"), std::string::npos) << r.status().message();
      }
    }
  }
  EXPECT_GT(rejected, 100);
  RecordProperty("decoded", decoded);
}

}  // namespace
}  // namespace scdino::data
