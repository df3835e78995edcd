#include "data/multicrop.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <string>

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

MultiCropAugmenter::MultiCropAugmenter(MultiCropOptions o) : o_(o), taps_(std::make_shared<TapCache>()) {
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

struct MultiCropAugmenter::TapCache {
  std::mutex mu;
  std::map<std::pair<int64_t, std::string>, torch::Tensor> taps;  // guarded by mu
};

torch::Tensor MultiCropAugmenter::BlurTaps(int64_t size, torch::Device device) const {
  const int64_t K = o_.blur_kernel;
  std::lock_guard<std::mutex> l(taps_->mu);
  auto& t = taps_->taps[{size, device.str()}];
  if (!t.defined()) {
    auto host = torch::zeros({K, size * size}, torch::kFloat32);
    auto a = host.accessor<float, 2>();
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t i = 0; i < size; ++i) {
        int64_t j = i + k - K / 2;
        if (j < 0) j = -j;
        if (j >= size) j = 2 * (size - 1) - j;
        j = std::clamp<int64_t>(j, 0, size - 1);
        a[k][i * size + j] += 1.0f;
      }
    }
    t = host.to(device);
  }
  return t;
}

torch::Tensor SeparableBlur(const torch::Tensor& x, const torch::Tensor& kernels, const torch::Tensor& taps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  // m[n][i][j]: the weight of source pixel j in output pixel i for image n.
  const auto m = kernels.mm(taps).view({N, S, S});
  // Along W: every row of every channel times m^T.
  auto y = x.reshape({N, C * S, S}).bmm(m.transpose(1, 2));
  // Along H: m times the columns, the channels side by side.
  y = m.bmm(y.view({N, C, S, S}).permute({0, 2, 1, 3}).reshape({N, S, C * S}));
  return y.view({N, S, C, S}).permute({0, 2, 1, 3}).contiguous();
}

std::vector<torch::Tensor> MultiCropAugmenter::ApplyTensorOps(const torch::Tensor& raw,
                                                              const std::vector<std::vector<CropParams>>& params) const {
  const auto images = raw.scalar_type() == torch::kFloat32 ? raw : raw.to(torch::kFloat32);
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t K = o_.blur_kernel, n = ncrops();
  // Per row (crop-major, then sample): theta (6; it maps output coordinates
  // in [-1, 1] to input ones, align_corners=false: x_in = sx * x_out + tx,
  // sx < 0 for a flip; a sample smaller than the padded canvas is cropped
  // within its own h x w), brightness (C), blur taps (K), solarise (1).
  const int64_t fields = 6 + C + K + 1;
  auto host = torch::zeros({n * B, fields}, torch::kFloat32);
  auto a = host.accessor<float, 2>();
  std::vector<bool> any_bright(n), any_blur(n), any_solar(n);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t b = 0; b < B; ++b) {
      const CropParams& p = params[c][b];
      auto row = a[c * B + b];
      const double sx = p.width / W, sy = p.height / H;
      row[0] = static_cast<float>(p.hflip ? -sx : sx);
      row[2] = static_cast<float>((p.left + p.width / 2.0) / W * 2.0 - 1.0);
      row[4] = static_cast<float>(p.vflip ? -sy : sy);
      row[5] = static_cast<float>((p.top + p.height / 2.0) / H * 2.0 - 1.0);
      for (int64_t k = 0; k < C; ++k) {
        row[6 + k] = p.brightness.empty() ? 1.0f : static_cast<float>(p.brightness[static_cast<size_t>(k)]);
      }
      any_bright[c] = any_bright[c] || !p.brightness.empty();
      if (p.blur_sigma > 0) {
        const auto g = GaussianKernel(p.blur_sigma, K);
        for (int64_t k = 0; k < K; ++k) row[6 + C + k] = static_cast<float>(g[static_cast<size_t>(k)]);
        any_blur[c] = true;
      } else {
        row[6 + C + K / 2] = 1.0f;
      }
      row[6 + C + K] = p.solarize ? 1.0f : 0.0f;
      any_solar[c] = any_solar[c] || p.solarize;
    }
  }
  const auto dev = images.device();
  if (dev.is_cuda()) host = host.pin_memory();
  const auto rows = host.to(dev, /*non_blocking=*/true);
  torch::Tensor mean, stdev;
  if (!o_.mean.empty()) {
    std::vector<float> m, s;
    for (size_t k = 0; k < o_.mean.size(); ++k) {
      m.push_back(static_cast<float>(o_.mean[k]));
      s.push_back(static_cast<float>(o_.std[k]));
    }
    auto stats = torch::stack({torch::tensor(m), torch::tensor(s)});
    if (dev.is_cuda()) stats = stats.pin_memory();
    stats = stats.to(dev, /*non_blocking=*/true);
    mean = stats[0].view({1, C, 1, 1});
    stdev = stats[1].view({1, C, 1, 1});
  }
  std::vector<torch::Tensor> crops;
  crops.reserve(static_cast<size_t>(n));
  // The crops of one size together: the two globals, then the locals.
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, n - 2}}) {
    if (count <= 0) continue;
    const int64_t size = first < 2 ? o_.global_size : o_.local_size;
    const int64_t N = count * B;
    const auto r = rows.narrow(0, first * B, N);
    const auto source = count == 1 ? images : images.repeat({count, 1, 1, 1});
    auto grid = torch::nn::functional::affine_grid(r.narrow(1, 0, 6).view({N, 2, 3}), {N, C, size, size},
                                                   /*align_corners=*/false);
    // Bicubic (mode 2) with border padding (mode 1); the functional options
    // of LibTorch 1.13 do not offer bicubic.
    auto out = torch::grid_sampler(source, grid, /*interpolation_mode=*/2, /*padding_mode=*/1, /*align_corners=*/false)
                   .clamp_(0.0, 1.0);
    bool bright = false, blur = false, solar = false;
    for (int64_t c = first; c < first + count; ++c) {
      bright = bright || any_bright[c];
      blur = blur || any_blur[c];
      solar = solar || any_solar[c];
    }
    if (bright) out = (out * r.narrow(1, 6, C).view({N, C, 1, 1})).clamp_(0.0, 1.0);
    if (blur) out = SeparableBlur(out, r.narrow(1, 6 + C, K), BlurTaps(size, dev));
    if (solar) {
      const auto m = r.narrow(1, 6 + C + K, 1).view({N, 1, 1, 1}) > 0.5;
      out = torch::where(m & (out > o_.solarize_threshold), 1.0 - out, out);
    }
    if (mean.defined()) out = (out - mean).div_(stdev);
    for (auto& crop : out.chunk(count)) crops.push_back(crop);
  }
  return crops;
}

std::vector<torch::Tensor> MultiCropAugmenter::Apply(const torch::Tensor& images, const std::vector<int64_t>& indices,
                                                     int64_t epoch,
                                                     const std::vector<std::array<int64_t, 2>>& sizes) const {
  TORCH_CHECK(images.dim() == 4 && images.size(0) == static_cast<int64_t>(indices.size()),
              "multi-crop expects [B, C, H, W] images and B indices, got ", images.sizes(), " and ", indices.size());
  TORCH_CHECK(o_.mean.empty() || static_cast<int64_t>(o_.mean.size()) == images.size(1), "normalisation has ",
              o_.mean.size(), " channel means, the images have ", images.size(1), " channels");
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  std::vector<std::vector<CropParams>> params(static_cast<size_t>(ncrops()));
  for (int64_t c = 0; c < ncrops(); ++c) {
    params[c].reserve(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t h = sizes.empty() ? H : sizes[b][0], w = sizes.empty() ? W : sizes[b][1];
      params[c].push_back(Params(epoch, indices[b], c, h, w, C));
    }
  }
  if (o_.fused_cpu && images.device().is_cpu() && images.scalar_type() == torch::kFloat32) {
    const auto contiguous = images.contiguous();
    std::vector<torch::Tensor> crops;
    for (int64_t c = 0; c < ncrops(); ++c) {
      crops.push_back(CropBatchFusedCpu(contiguous, params[c], c < 2 ? o_.global_size : o_.local_size, sizes, o_));
    }
    return crops;
  }
  return ApplyTensorOps(images, params);
}

}  // namespace scdino::data
