#include "data/image_io.h"

#include <gtest/gtest.h>
#include <tiffio.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <random>
#include <vector>

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
  const std::string base = std::string(scdino::testing::SourceDir()) + "/tests/data/tiled-layouts/" + GetParam();
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

// The other sample types microscopy tools write (tests/data/sample-formats/make.py):
// signed 8-, 16- and 32-bit integers, unsigned 32-bit, 16- and 64-bit
// floats, stored interleaved, in planes, a page per channel, tiled and
// deflated, and big-endian; each decodes to float32, the extremes of the
// integer types included.
class SampleFormat : public ::testing::TestWithParam<std::string> {};

std::string SampleFormats() { return std::string(scdino::testing::SourceDir()) + "/tests/data/sample-formats/"; }

TEST_P(SampleFormat, DecodesToFloat32AsTifffileWroteIt) {
  auto want = ReadNpy(SampleFormats() + GetParam() + ".npy");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto got = ReadImage(SampleFormats() + GetParam() + ".tif");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->scalar_type(), torch::kFloat32);
  EXPECT_EQ(got->sizes(), want->sizes());
  EXPECT_TRUE(got->equal(*want)) << GetParam() << ": largest difference "
                                 << (*got - *want).abs().max().item<float>();
}

INSTANTIATE_TEST_SUITE_P(TifffileSampleTypes, SampleFormat,
                         ::testing::Values("contig_i8", "contig_i16", "separate_i16", "pages_i16", "contig_i32",
                                           "contig_u32", "contig_f16", "contig_f64", "pages_f64",
                                           "tiled_deflate_f64", "bigendian_i16"));

TEST(ImageIo, AComplexTiffIsRefusedNamingTheFileAndItsSampleType) {
  auto r = ReadImage(SampleFormats() + "refused_complex64.tif");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("refused_complex64.tif"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("64-bit complex float"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("expected 8-, 16- or 32-bit integers or 16-, 32- or 64-bit floats"),
            std::string::npos)
      << r.status().message();
}

// Headers that ask for more than their file can hold are refused before
// anything is allocated: the issue's 162-byte TIFF with a terabyte tile, a
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

// PNG's and JPEG's headers are checked against the same bounds as TIFF's
// before OpenCV sees the file: a 16-bit RGBA PNG claiming 32768 x 32768
// pixels (OpenCV would allocate 8 GiB for it, and the decode about 48) and
// a JPEG claiming 65535 x 65535 are refused naming the size, and a real
// 16-bit RGBA PNG still decodes, unsigned, in RGBA order.
TEST(ImageIo, PngAndJpegHeadersAreCheckedBeforeDecoding) {
  scdino::testing::ScratchDir dir;
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  };
  const std::string ihdr = "IHDR" + be32(32768) + be32(32768) + std::string{16, 6, 0, 0, 0};
  const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + ihdr + be32(0) + be32(4) + "IDAT" +
                          std::string(8, 'x') + be32(0) + "IEND" + be32(0);
  ASSERT_TRUE(WriteFileAtomic(dir.file("huge.png"), png).ok());
  auto p = ReadImage(dir.file("huge.png"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(p.status().message().find(dir.file("huge.png") + ": cannot decode PNG: the header asks for a 32768x32768x4 image"),
            std::string::npos)
      << p.status().message();
  // SOI, a frame header (8 bits, 65535 x 65535, 3 components), EOI.
  const std::string jpeg = std::string("\xff\xd8\xff\xe0\x00\x04zz\xff\xc0\x00\x11\x08\xff\xff\xff\xff\x03", 19) +
                           std::string(9, '\x11') + "\xff\xd9";
  ASSERT_TRUE(WriteFileAtomic(dir.file("huge.jpg"), jpeg).ok());
  auto j = ReadImage(dir.file("huge.jpg"));
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find(dir.file("huge.jpg") + ": cannot decode JPEG: the header asks for a 65535x65535x3 image"),
            std::string::npos)
      << j.status().message();
  ASSERT_TRUE(WriteFileAtomic(dir.file("cut.jpg"), std::string("\xff\xd8\xff\xe0\x00\x10", 6)).ok());
  EXPECT_EQ(ReadImage(dir.file("cut.jpg")).status().code(), StatusCode::kDataLoss);

  cv::Mat bgra(3, 4, CV_16UC4);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) bgra.at<cv::Vec4w>(y, x) = cv::Vec4w(1000 + x, 2000 + y, 65535, 40000);
  }
  ASSERT_TRUE(cv::imwrite(dir.file("rgba16.png"), bgra));
  auto rgba = ReadImage(dir.file("rgba16.png"));
  ASSERT_TRUE(rgba.ok()) << rgba.status().ToString();
  ASSERT_EQ(rgba->sizes(), (std::vector<int64_t>{3, 4, 4}));
  EXPECT_EQ(rgba->scalar_type(), torch::kInt32);
  EXPECT_EQ((*rgba)[2][1][0].item<int>(), 65535) << "R";
  EXPECT_EQ((*rgba)[2][1][1].item<int>(), 2002) << "G";
  EXPECT_EQ((*rgba)[2][1][2].item<int>(), 1001) << "B";
  EXPECT_EQ((*rgba)[2][1][3].item<int>(), 40000) << "A, unsigned";
}

// Bytes of a /proc/self/status line ("VmRSS", "VmHWM").
uint64_t ProcStatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// Decoding holds the output and one scratch buffer, never the page several
// times over: a 16-bit 2048 x 2048 x 8 image stored as one 64 MiB strip
// (as WriteTiff and many writers store it) decodes to a 128 MiB int32
// array, read a few rows at a time. The old decoder held the stored page,
// its copy, the widened copy and the masked copy: about 384 MiB. The same
// for separate planes of 8.4 MiB strips, each decoded in pieces too. Besides
// the output, libtiff holds one compressed strip (at most the file).
TEST(ImageIo, DecodingATiffHoldsTheOutputAndOneScratchBuffer) {
  if (scdino::testing::kSanitizedAllocator) {
    GTEST_SKIP() << "a sanitizer's allocator keeps freed memory in quarantine: the resident peak is not the decoder's";
  }
  scdino::testing::ScratchDir dir;
  constexpr int64_t kH = 2048, kW = 2048, kC = 8;
  {
    auto image = (torch::arange(kH * kW * kC, torch::kInt64) * 7919 % 65536).to(torch::kInt32).reshape({kH, kW, kC});
    ASSERT_TRUE(WriteTiff(dir.file("big.tif"), image, TiffCompression::kDeflate).ok());
  }
  // The separate-plane file, written with libtiff: three planes of one strip.
  constexpr uint32_t kS = 2100;
  {
    TIFF* t = TIFFOpen(dir.file("planes.tif").c_str(), "w");
    ASSERT_NE(t, nullptr);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, kS);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, kS);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_SEPARATE);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, kS);
    std::vector<uint16_t> plane(static_cast<size_t>(kS) * kS);
    for (uint16_t s = 0; s < 3; ++s) {
      for (size_t i = 0; i < plane.size(); ++i) plane[i] = static_cast<uint16_t>(i * (s + 3) + 40000);
      ASSERT_GE(TIFFWriteEncodedStrip(t, s, plane.data(), static_cast<tmsize_t>(plane.size() * 2)), 0);
    }
    TIFFClose(t);
  }
  for (const auto& [name, out_bytes] :
       std::vector<std::pair<std::string, uint64_t>>{{"big.tif", kH * kW * kC * 4}, {"planes.tif", uint64_t{kS} * kS * 3 * 4}}) {
    std::ofstream("/proc/self/clear_refs") << "5";  // the high-water mark starts again from here
    const uint64_t before = ProcStatusBytes("VmRSS");
    auto got = ReadImage(dir.file(name));
    const uint64_t peak = ProcStatusBytes("VmHWM");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_GT(before, 0u);
    // libtiff reads one compressed strip whole (at most the file).
    const uint64_t file_bytes = std::filesystem::file_size(dir.file(name));
    EXPECT_LT(peak - before, out_bytes + file_bytes + (16ull << 20))
        << name << ": the decode held " << (peak - before) / (1 << 20) << " MiB for a " << out_bytes / (1 << 20)
        << " MiB array from a " << file_bytes / (1 << 20) << " MiB file";
    RecordProperty(name + "_peak_mib", static_cast<int>((peak - before) >> 20));
    if (name == "big.tif") {
      auto want = (torch::arange(kH * kW * kC, torch::kInt64) * 7919 % 65536).to(torch::kInt32).reshape({kH, kW, kC});
      EXPECT_TRUE(got->equal(want));
    } else {
      ASSERT_EQ(got->sizes(), (std::vector<int64_t>{kS, kS, 3}));
      for (int64_t s = 0; s < 3; ++s) {
        for (int64_t i : {int64_t{0}, int64_t{kS} * kS / 2 + 7, int64_t{kS} * kS - 1}) {
          EXPECT_EQ((*got)[i / kS][i % kS][s].item<int64_t>(), static_cast<uint16_t>(i * (s + 3) + 40000)) << s << " " << i;
        }
      }
    }
  }
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

// Many truncated and byte-flipped copies of every fixture TIFF (the shared
// layouts and the sample types above) go through the reader: each either decodes or returns an error; none crashes.
TEST(ImageIo, CorruptAndTruncatedTiffsNeverCrash) {
  scdino::testing::ScratchDir dir;
  uint32_t seed = 1234;
  int decoded = 0, rejected = 0;
  std::vector<std::filesystem::path> fixtures;
  for (const std::string& folder : {Layouts(), SampleFormats()}) {
    for (const auto& e : std::filesystem::directory_iterator(folder)) {
      if (e.path().extension() == ".tif") fixtures.push_back(e.path());
    }
  }
  std::sort(fixtures.begin(), fixtures.end());  // the same damage for the same file in every run
  for (const auto& fixture : fixtures) {
    const std::string bytes = *ReadFile(fixture.string());
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
