#include "data/image_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <random>

#include "common/files.h"
#include "common/safetensors.h"
#include "support/damage.h"
#include "support/test_support.h"

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
