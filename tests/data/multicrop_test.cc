#include "data/multicrop.h"
#include "common/op_count.h"

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
  o.brightness_p = 0.0;
  o.blur_p = {0.0, 0.0, 0.0};
  o.solarize_p = 0.0;
  return o;
}

// Every test runs on the fused CPU path and on the tensor-op path (CUDA's).
class MultiCrop : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Paths, MultiCrop, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "FusedCpu" : "TensorOps"; });

TEST_P(MultiCrop, ShapesOfEveryCrop) {
  MultiCropOptions o;
  o.fused_cpu = GetParam();
  o.global_size = 32;
  o.local_size = 16;
  o.local_crops_number = 3;
  MultiCropAugmenter aug(o);
  auto crops = aug.Apply(torch::rand({4, 5, 50, 50}), {0, 1, 2, 3}, 0);
  ASSERT_EQ(crops.size(), 5u);
  EXPECT_EQ(crops[0].sizes(), (std::vector<int64_t>{4, 5, 32, 32}));
  EXPECT_EQ(crops[4].sizes(), (std::vector<int64_t>{4, 5, 16, 16}));
}

TEST_P(MultiCrop, AFlipFlips) {
  auto img = torch::rand({1, 3, 12, 12});
  for (bool h : {false, true}) {
    for (bool v : {false, true}) {
      auto o = Whole();
      o.fused_cpu = GetParam();
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

TEST_P(MultiCrop, CropBoxesFollowTheScaleRange) {
  MultiCropOptions o;
  o.fused_cpu = GetParam();
  MultiCropAugmenter aug(o);
  (void)GetParam();
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

TEST_P(MultiCrop, ASamplesCropsDoNotDependOnItsBatch) {
  MultiCropOptions o;
  o.fused_cpu = GetParam();
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

TEST_P(MultiCrop, NormalisesPerChannel) {
  auto o = Whole();
  o.fused_cpu = GetParam();
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

TEST_P(MultiCrop, BrightnessScalesEachChannelWithinItsRange) {
  auto o = Whole();
  o.fused_cpu = GetParam();
  o.hflip_p = o.vflip_p = 0;
  o.brightness_p = 1.0;
  auto img = torch::full({8, 3, 12, 12}, 0.4f);
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  auto crop = MultiCropAugmenter(o).Apply(img, idx, 0)[0];
  auto factor = crop.mean({2, 3}) / 0.4;  // [B, C]
  EXPECT_GE(factor.min().item<double>(), 0.5 - 1e-4);
  EXPECT_LE(factor.max().item<double>(), 1.25 + 1e-4);
  EXPECT_GT((factor.select(1, 0) - factor.select(1, 1)).abs().max().item<double>(), 1e-3) << "per-channel factors";
  // Bright pixels clamp at 1.
  auto ones = MultiCropAugmenter(o).Apply(torch::ones({8, 3, 12, 12}), idx, 0)[0];
  EXPECT_LE(ones.max().item<float>(), 1.0f);
}

TEST_P(MultiCrop, BlurStaysWithinItsSigmaBounds) {
  // A single bright pixel spreads into the kernel: its spread (second
  // moment) lies between that of sigma 0.1 and sigma 1.5 truncated to 5x5.
  auto o = Whole();
  o.fused_cpu = GetParam();
  o.hflip_p = o.vflip_p = 0;
  o.blur_p = {1.0, 1.0, 1.0};
  auto img = torch::zeros({16, 1, 12, 12});
  img.select(2, 6).select(2, 6).fill_(1.0);
  std::vector<int64_t> idx(16);
  for (int i = 0; i < 16; ++i) idx[i] = i;
  auto crop = MultiCropAugmenter(o).Apply(img, idx, 0)[0];
  auto pos = torch::arange(12, torch::kFloat32) - 6;
  auto row = crop.sum(3).squeeze(1);  // [B, 12] mass per row
  auto var = (row * pos * pos).sum(1) / row.sum(1);
  auto truncated_var = [](double s) {
    double num = 0, den = 0;
    for (int x = -2; x <= 2; ++x) {
      double w = std::exp(-0.5 * x * x / (s * s));
      num += w * x * x;
      den += w;
    }
    return num / den;
  };
  EXPECT_GE(var.min().item<double>(), truncated_var(0.1) - 1e-4);
  EXPECT_LE(var.max().item<double>(), truncated_var(1.5) + 1e-4);
  EXPECT_GT(var.max().item<double>() - var.min().item<double>(), 0.1) << "sigma varies between samples";
  EXPECT_NEAR(crop.sum().item<double>(), 16.0, 1e-3) << "blur keeps the mass";
}

TEST_P(MultiCrop, SolarisesOnlyTheSecondGlobalCropAboveTheThreshold) {
  auto o = Whole();
  o.fused_cpu = GetParam();
  o.hflip_p = o.vflip_p = 0;
  o.solarize_p = 1.0;
  auto img = torch::linspace(0, 1, 144).view({1, 1, 12, 12});
  auto crops = MultiCropAugmenter(o).Apply(img, {0}, 0);
  EXPECT_TRUE(AllClose(crops[0], img, 0, 1e-5)) << "first global crop untouched";
  EXPECT_TRUE(AllClose(crops[2], img, 0, 1e-5)) << "local crop untouched";
  auto want = torch::where(img > 0.5, 1 - img, img);
  EXPECT_TRUE(AllClose(crops[1], want, 0, 1e-5));
}

TEST_P(MultiCrop, PaddedSamplesAreCroppedWithinTheirOwnPixels) {
  // A 6x6 image padded into a 12x12 canvas: a whole-image crop sees only its
  // 6x6 pixels (the canvas beyond is never sampled).
  auto o = Whole();
  o.fused_cpu = GetParam();
  o.hflip_p = o.vflip_p = 0;
  o.global_size = 6;
  auto canvas = torch::full({1, 1, 12, 12}, 0.9f);
  canvas.slice(2, 0, 6).slice(3, 0, 6).copy_(torch::rand({6, 6}) * 0.5);
  auto crop = MultiCropAugmenter(o).Apply(canvas, {0}, 0, {{6, 6}})[0];
  EXPECT_TRUE(AllClose(crop[0][0], canvas[0][0].slice(0, 0, 6).slice(1, 0, 6), 0, 1e-5));
}

// The tensor-op blur (two batched products with banded matrices, no
// convolution: no cuDNN on a GPU) is torchvision's: reflect padding, then
// the kernel along each axis, each image with its own kernel.
TEST(MultiCropPaths, TheBlurAsMatrixProductsIsTheReflectPaddedConvolution) {
  torch::manual_seed(8);
  const int64_t N = 3, C = 2, S = 12, K = 5;
  const auto x = torch::rand({N, C, S, S});
  std::vector<torch::Tensor> rows;
  for (double sigma : {0.3, 1.0, 1.5}) rows.push_back(torch::tensor(GaussianKernel(sigma, K), torch::kFloat32));
  const auto kernels = torch::stack(rows);
  auto taps = torch::zeros({K, S * S});
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t i = 0; i < S; ++i) {
      int64_t j = i + k - K / 2;
      j = j < 0 ? -j : j >= S ? 2 * (S - 1) - j : j;
      taps[k][i * S + j] += 1.0;
    }
  }
  OpCounter counter;
  const auto got = SeparableBlur(x, kernels, taps);
  // No convolution: nothing a GPU image would need cuDNN for.
  EXPECT_EQ(counter.Take().by_name.count("aten::convolution"), 0u);
  namespace F = torch::nn::functional;
  auto want = F::pad(x.reshape({1, N * C, S, S}), F::PadFuncOptions({K / 2, K / 2, K / 2, K / 2}).mode(torch::kReflect));
  const auto k = kernels.repeat_interleave(C, 0);
  want = F::conv2d(want, k.view({N * C, 1, K, 1}), F::Conv2dFuncOptions().groups(N * C));
  want = F::conv2d(want, k.view({N * C, 1, 1, K}), F::Conv2dFuncOptions().groups(N * C)).reshape({N, C, S, S});
  EXPECT_TRUE(AllClose(got, want, 0, 1e-6));
}

TEST(MultiCropPaths, FusedCpuAgreesWithTensorOps) {
  // Same crop boxes, flips, brightness and solarisation on both paths; they
  // differ only in resampling detail (the fused path clamps bicubic taps to
  // the crop box, as torchvision; grid sampling reads past it), so compare
  // statistics of the crops rather than pixels.
  MultiCropOptions o;
  o.global_size = 32;
  o.local_size = 16;
  o.local_crops_number = 2;
  o.blur_p = {0.0, 0.0, 0.0};
  auto img = torch::rand({8, 3, 40, 40});
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  auto fused = MultiCropAugmenter(o).Apply(img, idx, 3);
  o.fused_cpu = false;
  auto ops = MultiCropAugmenter(o).Apply(img, idx, 3);
  for (size_t c = 0; c < fused.size(); ++c) {
    EXPECT_EQ(fused[c].sizes(), ops[c].sizes());
    EXPECT_LT((fused[c].mean({2, 3}) - ops[c].mean({2, 3})).abs().max().item<double>(), 0.03) << "crop " << c;
  }
}

}  // namespace
}  // namespace scdino::data
