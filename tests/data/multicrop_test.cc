#include "data/multicrop.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace scdino::data {
namespace {

using scdino::testing::AllClose;

MultiCropOptions Whole() {
  // Full-image crops at the image's own size: only the flips remain.
  MultiCropOptions o;
  o.global_size = 12;
  o.local_size = 12;
  o.local_crops_number = 2;
  o.global_scale = {1.0, 1.0};
  o.local_scale = {1.0, 1.0};
  o.ratio = {1.0, 1.0};
  return o;
}

TEST(MultiCrop, ShapesOfEveryCrop) {
  MultiCropOptions o;
  o.global_size = 32;
  o.local_size = 16;
  o.local_crops_number = 3;
  MultiCropAugmenter aug(o);
  auto crops = aug.Apply(torch::rand({4, 5, 50, 50}), {0, 1, 2, 3}, 0);
  ASSERT_EQ(crops.size(), 5u);
  EXPECT_EQ(crops[0].sizes(), (std::vector<int64_t>{4, 5, 32, 32}));
  EXPECT_EQ(crops[4].sizes(), (std::vector<int64_t>{4, 5, 16, 16}));
}

TEST(MultiCrop, AFlipFlips) {
  auto img = torch::rand({1, 3, 12, 12});
  for (bool h : {false, true}) {
    for (bool v : {false, true}) {
      auto o = Whole();
      o.hflip_p = h ? 1.0 : 0.0;
      o.vflip_p = v ? 1.0 : 0.0;
      auto crop = MultiCropAugmenter(o).Apply(img, {7}, 0)[0];
      auto want = img;
      if (h) want = want.flip({3});
      if (v) want = want.flip({2});
      EXPECT_TRUE(AllClose(crop, want, 0, 1e-5)) << "hflip " << h << " vflip " << v;
    }
  }
}

TEST(MultiCrop, CropBoxesFollowTheScaleRange) {
  MultiCropOptions o;
  MultiCropAugmenter aug(o);
  for (int64_t i = 0; i < 200; ++i) {
    auto g = aug.Params(0, i, 0, 50, 50);
    auto l = aug.Params(0, i, 3, 50, 50);
    EXPECT_GE(g.height * g.width, 0.14 * 2500 * 0.85);
    EXPECT_LE(l.height * l.width, 0.14 * 2500 * 1.15);
    EXPECT_GE(g.top, 0);
    EXPECT_LE(g.top + g.height, 50);
    EXPECT_LE(l.left + l.width, 50);
  }
}

TEST(MultiCrop, ASamplesCropsDoNotDependOnItsBatch) {
  MultiCropOptions o;
  o.global_size = 16;
  o.local_size = 8;
  o.local_crops_number = 2;
  MultiCropAugmenter aug(o);
  auto images = torch::rand({6, 2, 20, 20});
  auto a = aug.Apply(images.index_select(0, torch::tensor({0, 3, 5})), {0, 3, 5}, 4);
  auto b = aug.Apply(images.index_select(0, torch::tensor({5, 1})), {5, 1}, 4);
  for (size_t c = 0; c < a.size(); ++c) EXPECT_TRUE(AllClose(a[c][2], b[c][0], 0, 1e-6)) << "crop " << c;
  // Another epoch gives other crops.
  auto e = aug.Apply(images.index_select(0, torch::tensor({5})), {5}, 5);
  EXPECT_FALSE(e[0][0].allclose(b[0][0]));
}

TEST(MultiCrop, NormalisesPerChannel) {
  auto o = Whole();
  o.mean = {0.5, 0.25};
  o.std = {0.5, 0.25};
  auto img = torch::rand({2, 2, 12, 12});
  o.hflip_p = o.vflip_p = 0;
  auto crop = MultiCropAugmenter(o).Apply(img, {0, 1}, 0)[0];
  auto want = (img - torch::tensor({0.5, 0.25}).view({1, 2, 1, 1})) / torch::tensor({0.5, 0.25}).view({1, 2, 1, 1});
  EXPECT_TRUE(AllClose(crop, want, 0, 1e-4));
  o.mean = {0.5};
  EXPECT_THROW(MultiCropAugmenter{o}, c10::Error);
}

}  // namespace
}  // namespace scdino::data
