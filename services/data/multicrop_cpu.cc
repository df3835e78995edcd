// The fused CPU path of the multi-crop augmentation (see multicrop.h).

#include <algorithm>
#include <array>
#include <cmath>

#include "data/multicrop.h"

namespace scdino::data {
namespace {

// Weights of one output pixel over a run of source pixels.
struct Taps {
  int64_t lo = 0;
  std::vector<float> w;
};

double Cubic1(double x) { return ((-0.75 + 2) * x - (-0.75 + 3)) * x * x + 1; }
double Cubic2(double x) { return ((-0.75 * x - 5 * -0.75) * x + 8 * -0.75) * x - 4 * -0.75; }

// 1-D map from n source pixels (the crop) to s output pixels: PyTorch's
// bicubic upsampling (align_corners=false, taps clamped to the crop), then a
// flip, then a blur with reflect padding; as sparse rows. Built sparse (4
// taps per output pixel, 4 x k with the blur), so it costs O(s k).
std::vector<Taps> Weights(int64_t s, int64_t n, bool flip, const std::vector<double>& blur) {
  std::vector<std::array<double, 4>> w(static_cast<size_t>(s));
  std::vector<int64_t> first(static_cast<size_t>(s));
  const double scale = static_cast<double>(n) / static_cast<double>(s);
  for (int64_t y = 0; y < s; ++y) {
    const double real = scale * (y + 0.5) - 0.5;
    const double fl = std::floor(real);
    const double t = real - fl;
    const int64_t yy = flip ? s - 1 - y : y;
    w[yy] = {Cubic2(t + 1), Cubic1(t), Cubic1(1 - t), Cubic2(2 - t)};
    first[yy] = static_cast<int64_t>(fl) - 1;
  }
  const std::vector<double> identity{1.0};
  const std::vector<double>& k = blur.empty() ? identity : blur;
  const int64_t K = static_cast<int64_t>(k.size());
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  std::vector<Taps> rows(static_cast<size_t>(s));
  for (int64_t y = 0; y < s; ++y) {
    int64_t lo = n, hi = -1;
    for (int64_t t = 0; t < K; ++t) {
      int64_t r = y + t - K / 2;
      if (r < 0) r = -r;
      if (r >= s) r = 2 * (s - 1) - r;
      r = std::clamp<int64_t>(r, 0, s - 1);
      for (int j = 0; j < 4; ++j) {
        const int64_t idx = std::clamp<int64_t>(first[r] + j, 0, n - 1);
        acc[idx] += k[t] * w[r][j];
        lo = std::min(lo, idx);
        hi = std::max(hi, idx);
      }
    }
    rows[y].lo = lo;
    rows[y].w.reserve(static_cast<size_t>(hi - lo + 1));
    for (int64_t i = lo; i <= hi; ++i) {
      rows[y].w.push_back(static_cast<float>(acc[i]));
      acc[i] = 0.0;
    }
  }
  return rows;
}

// One output plane: horizontal pass over the crop's rows into z, vertical
// pass (contiguous rows), then brightness, clamp, solarisation and
// normalisation on each row while it is in cache. Inlined into an AVX2+FMA
// and a baseline version; ComputePlane picks one at run time.
__attribute__((always_inline)) inline void PlaneBody(const float* plane, int64_t stride, int64_t rows, int64_t S,
                                                     const std::vector<Taps>& wx, const std::vector<Taps>& wy,
                                                     float* __restrict z, float f, bool solarize, float threshold,
                                                     float sc, float sh, float* __restrict dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = plane + i * stride;
    float* zr = z + i * S;
    for (int64_t x = 0; x < S; ++x) {
      const Taps& t = wx[x];
      const float* r = row + t.lo;
      float acc = 0.0f;
      for (size_t k = 0; k < t.w.size(); ++k) acc += t.w[k] * r[k];
      zr[x] = acc;
    }
  }
  for (int64_t y = 0; y < S; ++y) {
    float* d = dst + y * S;
    const Taps& t = wy[y];
    const float* z0 = z + t.lo * S;
    const float w0 = t.w[0];
    for (int64_t x = 0; x < S; ++x) d[x] = w0 * z0[x];
    for (size_t k = 1; k < t.w.size(); ++k) {
      const float wk = t.w[k];
      const float* zr = z + (t.lo + static_cast<int64_t>(k)) * S;
      for (int64_t x = 0; x < S; ++x) d[x] += wk * zr[x];
    }
    // Branch-free so that the compiler vectorises it.
    if (solarize) {
      for (int64_t x = 0; x < S; ++x) {
        float v = d[x] * f;
        v = v < 0.0f ? 0.0f : v;
        v = v > 1.0f ? 1.0f : v;
        const float flipped = 1.0f - v;
        v = v > threshold ? flipped : v;
        d[x] = v * sc + sh;
      }
    } else {
      for (int64_t x = 0; x < S; ++x) {
        float v = d[x] * f;
        v = v < 0.0f ? 0.0f : v;
        v = v > 1.0f ? 1.0f : v;
        d[x] = v * sc + sh;
      }
    }
  }
}

__attribute__((target("avx2,fma"))) void PlaneAvx2(const float* plane, int64_t stride, int64_t rows, int64_t S,
                                                   const std::vector<Taps>& wx, const std::vector<Taps>& wy, float* z,
                                                   float f, bool solarize, float threshold, float sc, float sh,
                                                   float* dst) {
  PlaneBody(plane, stride, rows, S, wx, wy, z, f, solarize, threshold, sc, sh, dst);
}

void PlaneBaseline(const float* plane, int64_t stride, int64_t rows, int64_t S, const std::vector<Taps>& wx,
                   const std::vector<Taps>& wy, float* z, float f, bool solarize, float threshold, float sc, float sh,
                   float* dst) {
  PlaneBody(plane, stride, rows, S, wx, wy, z, f, solarize, threshold, sc, sh, dst);
}

void ComputePlane(const float* plane, int64_t stride, int64_t rows, int64_t S, const std::vector<Taps>& wx,
                  const std::vector<Taps>& wy, float* z, float f, bool solarize, float threshold, float sc, float sh,
                  float* dst) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  (avx2 ? PlaneAvx2 : PlaneBaseline)(plane, stride, rows, S, wx, wy, z, f, solarize, threshold, sc, sh, dst);
}

}  // namespace

torch::Tensor CropBatchFusedCpu(const torch::Tensor& images, const std::vector<CropParams>& params, int64_t size,
                                const std::vector<std::array<int64_t, 2>>& sizes, const MultiCropOptions& o) {
  TORCH_CHECK(images.is_cpu() && images.scalar_type() == torch::kFloat32 && images.is_contiguous(),
              "fused CPU crops need contiguous float32 CPU images");
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3), S = size;
  auto out = torch::empty({B, C, S, S}, images.options());
  const float* src_all = images.data_ptr<float>();
  float* dst_all = out.data_ptr<float>();
  std::vector<float> scale(C, 1.0f), shift(C, 0.0f);
  for (int64_t c = 0; c < C && !o.mean.empty(); ++c) {
    scale[c] = static_cast<float>(1.0 / o.std[c]);
    shift[c] = static_cast<float>(-o.mean[c] / o.std[c]);
  }
  const float threshold = static_cast<float>(o.solarize_threshold);
  // One image after the other on the calling thread (a loader thread: the
  // step has LibTorch's threads; the loader's threads augment batches in
  // parallel). An at::parallel_for here was serial all along
  // (common/parallel.h says why).
  std::vector<float> z;
  for (int64_t b = 0; b < B; ++b) {
    const CropParams& p = params[b];
    const int64_t top = static_cast<int64_t>(p.top), left = static_cast<int64_t>(p.left);
    const int64_t ch = static_cast<int64_t>(p.height), cw = static_cast<int64_t>(p.width);
    TORCH_CHECK(top >= 0 && left >= 0 && top + ch <= (sizes.empty() ? H : sizes[b][0]) &&
                    left + cw <= (sizes.empty() ? W : sizes[b][1]),
                "crop box outside the image");
    const std::vector<double> blur = p.blur_sigma > 0 ? GaussianKernel(p.blur_sigma, o.blur_kernel) : std::vector<double>{};
    const auto wy = Weights(S, ch, p.vflip, blur);
    const auto wx = Weights(S, cw, p.hflip, blur);
    z.resize(static_cast<size_t>(ch * S));
    for (int64_t c = 0; c < C; ++c) {
      const float* plane = src_all + ((b * C + c) * H + top) * W + left;
      const float f = p.brightness.empty() ? 1.0f : static_cast<float>(p.brightness[c]);
      ComputePlane(plane, W, ch, S, wx, wy, z.data(), f, p.solarize, threshold, scale[c], shift[c],
                   dst_all + (b * C + c) * S * S);
    }
  }
  return out;
}

}  // namespace scdino::data
