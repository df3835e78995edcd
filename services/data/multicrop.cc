#include "data/multicrop.h"

#include <cmath>
#include <random>

#include "data/sampler.h"

namespace scdino::data {

std::vector<double> GaussianKernel(double sigma, int64_t k) {
  // torchvision's GaussianBlur kernel: exp(-x^2 / 2 sigma^2), normalised.
  std::vector<double> g(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double x = static_cast<double>(i - k / 2);
    sum += (g[i] = std::exp(-0.5 * (x / sigma) * (x / sigma)));
  }
  for (auto& v : g) v /= sum;
  return g;
}

MultiCropAugmenter::MultiCropAugmenter(MultiCropOptions o) : o_(o) {
  TORCH_CHECK(o_.global_size > 0 && o_.local_size > 0, "crop sizes must be positive");
  TORCH_CHECK(o_.local_crops_number >= 0, "local_crops_number must be >= 0, got ", o_.local_crops_number);
  TORCH_CHECK(o_.blur_kernel >= 1 && o_.blur_kernel % 2 == 1, "blur kernel must be odd, got ", o_.blur_kernel);
  TORCH_CHECK(o_.mean.size() == o_.std.size(), "normalisation needs as many means as stds, got ", o_.mean.size(),
              " and ", o_.std.size());
  for (double s : o_.std) TORCH_CHECK(s > 0, "normalisation std must be > 0, got ", s);
  for (const auto& s : {o_.global_scale, o_.local_scale}) {
    TORCH_CHECK(s[0] > 0 && s[0] <= s[1] && s[1] <= 1.0, "crop scale range must satisfy 0 < min <= max <= 1, got (",
                s[0], ", ", s[1], ")");
  }
}

CropParams MultiCropAugmenter::Params(int64_t epoch, int64_t sample, int64_t crop, int64_t h, int64_t w,
                                      int64_t c) const {
  std::mt19937_64 rng(MixSeed({o_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(sample),
                               static_cast<uint64_t>(crop), 0xc409ull}));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const auto& scale = crop < 2 ? o_.global_scale : o_.local_scale;
  const double area = static_cast<double>(h * w);
  const double log_r0 = std::log(o_.ratio[0]), log_r1 = std::log(o_.ratio[1]);
  CropParams p;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * (scale[0] + (scale[1] - scale[0]) * u01(rng));
    const double aspect = std::exp(log_r0 + (log_r1 - log_r0) * u01(rng));
    const double cw = std::round(std::sqrt(target * aspect));
    const double ch = std::round(std::sqrt(target / aspect));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      p.top = std::floor(u01(rng) * (h - ch + 1));
      p.left = std::floor(u01(rng) * (w - cw + 1));
      p.height = ch;
      p.width = cw;
      found = true;
    }
  }
  if (!found) {  // central crop with the ratio clamped, as torchvision
    const double in_ratio = static_cast<double>(w) / h;
    double cw = w, ch = h;
    if (in_ratio < o_.ratio[0]) {
      ch = std::round(cw / o_.ratio[0]);
    } else if (in_ratio > o_.ratio[1]) {
      cw = std::round(ch * o_.ratio[1]);
    }
    p.height = ch;
    p.width = cw;
    p.top = std::floor((h - ch) / 2);
    p.left = std::floor((w - cw) / 2);
  }
  p.hflip = u01(rng) < o_.hflip_p;
  p.vflip = u01(rng) < o_.vflip_p;
  if (u01(rng) < o_.brightness_p) {
    for (int64_t k = 0; k < c; ++k) p.brightness.push_back(o_.brightness[0] + (o_.brightness[1] - o_.brightness[0]) * u01(rng));
  }
  const double blur_p = o_.blur_p[std::min<int64_t>(crop, 2)];
  if (u01(rng) < blur_p) p.blur_sigma = o_.blur_sigma[0] + (o_.blur_sigma[1] - o_.blur_sigma[0]) * u01(rng);
  p.solarize = crop == 1 && u01(rng) < o_.solarize_p;
  return p;
}

torch::Tensor MultiCropAugmenter::CropBatch(const torch::Tensor& images, const std::vector<int64_t>& indices,
                                            int64_t epoch, int64_t crop, int64_t size,
                                            const std::vector<std::array<int64_t, 2>>& sizes) const {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  std::vector<CropParams> params;
  params.reserve(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t h = sizes.empty() ? H : sizes[b][0], w = sizes.empty() ? W : sizes[b][1];
    params.push_back(Params(epoch, indices[b], crop, h, w, C));
  }
  if (o_.fused_cpu && images.device().is_cpu() && images.scalar_type() == torch::kFloat32) {
    return CropBatchFusedCpu(images.contiguous(), params, size, sizes, o_);
  }
  return CropBatchTensorOps(images, params, size);
}

torch::Tensor MultiCropAugmenter::CropBatchTensorOps(const torch::Tensor& images, const std::vector<CropParams>& params,
                                                     int64_t size) const {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  // theta maps output coordinates in [-1, 1] to input coordinates
  // (align_corners=false): x_in = sx * x_out + tx, with sx < 0 for a flip.
  // A sample smaller than the padded canvas is cropped within its own h x w.
  auto theta = torch::zeros({B, 2, 3}, torch::kFloat32);
  auto bright = torch::ones({B, C}, torch::kFloat32);
  const int64_t K = o_.blur_kernel;
  auto kernels = torch::zeros({B, K}, torch::kFloat32);
  auto solar = torch::zeros({B}, torch::kBool);
  auto t = theta.accessor<float, 3>();
  auto br = bright.accessor<float, 2>();
  auto kr = kernels.accessor<float, 2>();
  auto so = solar.accessor<bool, 1>();
  bool any_bright = false, any_blur = false, any_solar = false;
  for (int64_t b = 0; b < B; ++b) {
    const CropParams& p = params[b];
    const double sx = p.width / W, sy = p.height / H;
    t[b][0][0] = static_cast<float>(p.hflip ? -sx : sx);
    t[b][0][2] = static_cast<float>((p.left + p.width / 2.0) / W * 2.0 - 1.0);
    t[b][1][1] = static_cast<float>(p.vflip ? -sy : sy);
    t[b][1][2] = static_cast<float>((p.top + p.height / 2.0) / H * 2.0 - 1.0);
    for (size_t k = 0; k < p.brightness.size(); ++k) br[b][k] = static_cast<float>(p.brightness[k]);
    any_bright |= !p.brightness.empty();
    if (p.blur_sigma > 0) {
      auto g = GaussianKernel(p.blur_sigma, K);
      for (int64_t k = 0; k < K; ++k) kr[b][k] = static_cast<float>(g[k]);
      any_blur = true;
    } else {
      kr[b][K / 2] = 1.0f;
    }
    so[b] = p.solarize;
    any_solar |= p.solarize;
  }
  const auto dev = images.device();
  auto grid = torch::nn::functional::affine_grid(theta.to(dev), {B, C, size, size}, /*align_corners=*/false);
  // Bicubic (mode 2) with border padding (mode 1); the functional options of
  // LibTorch 1.13 do not offer bicubic.
  auto out = torch::grid_sampler(images, grid, /*interpolation_mode=*/2, /*padding_mode=*/1, /*align_corners=*/false)
                 .clamp_(0.0, 1.0);
  if (any_bright) out = (out * bright.to(dev).view({B, C, 1, 1})).clamp_(0.0, 1.0);
  if (any_blur) {
    // Separable blur as grouped convolutions, one kernel per sample and
    // channel, reflect padding as torchvision.
    auto k = kernels.to(dev).repeat_interleave(C, 0);  // [B*C, K]
    auto x = out.reshape({1, B * C, size, size});
    namespace F = torch::nn::functional;
    x = F::pad(x, F::PadFuncOptions({K / 2, K / 2, K / 2, K / 2}).mode(torch::kReflect));
    x = F::conv2d(x, k.view({B * C, 1, K, 1}), F::Conv2dFuncOptions().groups(B * C));
    x = F::conv2d(x, k.view({B * C, 1, 1, K}), F::Conv2dFuncOptions().groups(B * C));
    out = x.reshape({B, C, size, size});
  }
  if (any_solar) {
    auto m = solar.to(dev).view({B, 1, 1, 1});
    out = torch::where(m & (out > o_.solarize_threshold), 1.0 - out, out);
  }
  if (!o_.mean.empty()) {
    auto opts = torch::TensorOptions().dtype(out.dtype()).device(dev);
    auto mean = torch::tensor(o_.mean, opts).view({1, -1, 1, 1});
    auto std = torch::tensor(o_.std, opts).view({1, -1, 1, 1});
    out = (out - mean) / std;
  }
  return out;
}

std::vector<torch::Tensor> MultiCropAugmenter::Apply(const torch::Tensor& images, const std::vector<int64_t>& indices,
                                                     int64_t epoch,
                                                     const std::vector<std::array<int64_t, 2>>& sizes) const {
  TORCH_CHECK(images.dim() == 4 && images.size(0) == static_cast<int64_t>(indices.size()),
              "multi-crop expects [B, C, H, W] images and B indices, got ", images.sizes(), " and ", indices.size());
  TORCH_CHECK(o_.mean.empty() || static_cast<int64_t>(o_.mean.size()) == images.size(1), "normalisation has ",
              o_.mean.size(), " channel means, the images have ", images.size(1), " channels");
  std::vector<torch::Tensor> crops;
  crops.reserve(ncrops());
  for (int64_t c = 0; c < ncrops(); ++c) {
    crops.push_back(CropBatch(images, indices, epoch, c, c < 2 ? o_.global_size : o_.local_size, sizes));
  }
  return crops;
}

}  // namespace scdino::data
