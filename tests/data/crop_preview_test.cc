#include "data/crop_preview.h"

#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>

#include "common/files.h"
#include "data/image_io.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

MultiCropOptions SmallRecipe() {
  MultiCropOptions o;
  o.global_size = 24;
  o.local_size = 10;
  o.local_crops_number = 3;
  o.seed = 7;
  // Normalisation statistics the preview must leave out.
  o.mean = {0.4, 0.5};
  o.std = {0.1, 0.2};
  return o;
}

// The picture holds the image and every crop the augmenter makes, each at
// its own size, one row per channel, without the normalisation.
TEST(CropPreview, ShowsTheImageAndEveryCropAtItsSizeWithoutNormalisation) {
  torch::manual_seed(3);
  const auto image = torch::rand({2, 30, 40});
  const auto o = SmallRecipe();
  const auto picture = CropPreview(image, o, /*index=*/5);
  // Columns: the image at 24 px along its longer side (18 x 24), 2 globals
  // (24), 3 locals (10), 4 px around each; rows: 2 channels of 24 px.
  ASSERT_EQ(picture.scalar_type(), torch::kUInt8);
  EXPECT_EQ(picture.size(0), 4 + 2 * (24 + 4));
  EXPECT_EQ(picture.size(1), 4 + (24 + 4) + 2 * (24 + 4) + 3 * (10 + 4));

  MultiCropOptions plain = o;
  plain.mean.clear();
  plain.std.clear();
  const auto crops = MultiCropAugmenter(plain).Apply(image.unsqueeze(0), {5}, 0);
  ASSERT_EQ(crops.size(), 5u);
  const int64_t first_global_x = 4 + 24 + 4, first_local_x = first_global_x + 2 * (24 + 4);
  for (int64_t ch = 0; ch < 2; ++ch) {
    const int64_t y = 4 + ch * (24 + 4);
    auto tile = picture.slice(0, y, y + 24).slice(1, first_global_x + 24 + 4, first_global_x + 2 * 24 + 4);
    auto want = (crops[1][0][ch].clamp(0, 1) * 255).round().to(torch::kUInt8);
    EXPECT_TRUE(torch::equal(tile, want)) << "second global crop, channel " << ch;
    auto local = picture.slice(0, y, y + 10).slice(1, first_local_x + 2 * 14, first_local_x + 2 * 14 + 10);
    EXPECT_TRUE(torch::equal(local, (crops[4][0][ch].clamp(0, 1) * 255).round().to(torch::kUInt8)))
        << "third local crop, channel " << ch;
    // Below a local crop, the rest of its row is the white background.
    EXPECT_EQ(picture.slice(0, y + 10, y + 24).slice(1, first_local_x, first_local_x + 10).min().item<int>(), 255);
  }
}

TEST(CropPreview, WritesAPngThatReadsBackAsThePicture) {
  scdino::testing::ScratchDir dir;
  const auto image = torch::rand({2, 20, 20});
  const std::string path = dir.file("crops_preview.png");
  ASSERT_TRUE(WriteCropPreview(path, image, SmallRecipe()).ok());
  const cv::Mat read = cv::imread(path, cv::IMREAD_UNCHANGED);
  ASSERT_FALSE(read.empty()) << path;
  const auto picture = CropPreview(image, SmallRecipe());
  // 130 px wide: each pixel 4 times (520 px), the whole factor nearest 640.
  ASSERT_EQ(picture.size(1), 130);
  ASSERT_EQ(read.rows, 4 * picture.size(0));
  ASSERT_EQ(read.cols, 4 * picture.size(1));
  ASSERT_EQ(read.type(), CV_8UC1);
  auto back = torch::from_blob(read.data, {read.rows, read.cols}, torch::kUInt8);
  for (int64_t dy = 0; dy < 4; ++dy) {
    for (int64_t dx = 0; dx < 4; ++dx) {
      EXPECT_TRUE(torch::equal(back.slice(0, dy, read.rows, 4).slice(1, dx, read.cols, 4), picture))
          << "the copy at (" << dy << ", " << dx << ")";
    }
  }

  const auto refused = WriteCropPreview(dir.file("no/such/dir/p.png"), image, SmallRecipe());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find(dir.file("no/such/dir/p.png")), std::string::npos) << refused.ToString();
}

// A run's picture: the first of the data set's first images that loads
// (an unreadable file before it passed over), the synthetic set's first
// cell in the run's channels, or NotFound and no file.
TEST(CropPreview, ARunsPictureIsOfItsFirstImageThatLoads) {
  scdino::testing::ScratchDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.file("a.tif"), "not a TIFF").ok());
  const auto hwc = torch::randint(0, 256, {20, 20, 2}, torch::kInt64).to(torch::kUInt8);
  ASSERT_TRUE(WriteTiff(dir.file("b.tif"), hwc).ok());
  Dataset d;
  d.root = dir.path();
  d.entries = {{dir.file("a.tif"), 0}, {dir.file("b.tif"), 0}};
  ImagePrep prep;
  const std::string path = dir.file("run/crops_preview.png");
  ASSERT_TRUE(WriteDataCropPreview(path, d, prep, SmallRecipe()).ok());
  auto b = LoadEntry(d, 1, prep);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(WriteCropPreview(dir.file("want.png"), *b, SmallRecipe()).ok());
  EXPECT_EQ(*ReadFile(path), *ReadFile(dir.file("want.png")));

  SyntheticOptions synthetic;
  synthetic.channels = 3;
  synthetic.size = 20;
  prep.channels = {2};
  ASSERT_TRUE(WriteDataCropPreview(dir.file("synthetic.png"), Dataset{}, prep, SmallRecipe(), &synthetic).ok());
  const cv::Mat one = cv::imread(dir.file("synthetic.png"), cv::IMREAD_UNCHANGED);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(one.rows, 4 * (4 + 1 * (24 + 4))) << "one channel, one row of tiles";

  d.entries.resize(1);
  const auto none = WriteDataCropPreview(dir.file("none.png"), d, ImagePrep{}, SmallRecipe());
  EXPECT_EQ(none.code(), StatusCode::kNotFound) << none.ToString();
  EXPECT_FALSE(FileExists(dir.file("none.png")));
}

}  // namespace
}  // namespace scdino::data
