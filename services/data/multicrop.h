// Multi-crop views of a batch of raw images as batched tensor operations on
// the training device: the crops of one size (the 2 globals, then the
// locals) of the whole batch go through one affine grid sample (the random
// resized crop and both flips), one per-channel brightness, one Gaussian
// blur as two batched matrix products (no convolution: a GPU image needs no
// cuDNN), one solarisation and one normalisation. Every random parameter of
// a sample's crop derives from (seed, epoch, sample index, crop), so a crop
// does not depend on batch composition, thread count or world size; the
// parameters of a whole batch reach the device as one tensor (page-locked
// for a GPU, so the copy does not wait for the device). Nothing is read back
// on the host. Apply is thread-safe (the loader's threads share one
// augmenter).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace scdino::data {

struct MultiCropOptions {
  int64_t global_size = 224;
  int64_t local_size = 96;
  int64_t local_crops_number = 8;
  std::array<double, 2> global_scale{0.14, 1.0};
  std::array<double, 2> local_scale{0.05, 0.14};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  double hflip_p = 0.5;
  double vflip_p = 0.5;
  /// Per-channel brightness factor U(range), applied with this probability
  /// to each crop, then clamped to [0, 1].
  double brightness_p = 0.8;
  std::array<double, 2> brightness{0.5, 1.25};
  /// Gaussian blur probability: first global crop, second global, locals.
  std::array<double, 3> blur_p{1.0, 0.1, 0.5};
  std::array<double, 2> blur_sigma{0.1, 1.5};
  int64_t blur_kernel = 5;
  /// Solarisation (x > threshold becomes 1 - x) of the second global crop.
  double solarize_p = 0.2;
  double solarize_threshold = 0.5;
  uint64_t seed = 0;
  /// On CPU, compute each crop in one fused separable pass (resize, flips
  /// and blur as two sparse matrix products, then brightness, clamp,
  /// solarisation and normalisation while the plane is in cache). false: the
  /// tensor-op path that CUDA uses (affine grid sample, grouped blur).
  bool fused_cpu = true;
  /// Per-channel normalisation applied last; empty: none.
  std::vector<double> mean, std;
};

/// One crop of one sample: box in pixels of the source image, flips, and the
/// photometric operations (scDINO's recipe, in this order after the crop).
struct CropParams {
  double top = 0, left = 0, height = 0, width = 0;
  bool hflip = false, vflip = false;
  std::vector<double> brightness;  ///< per channel; empty: not applied
  double blur_sigma = 0.0;         ///< 0: not applied
  bool solarize = false;
};

class MultiCropAugmenter {
 public:
  explicit MultiCropAugmenter(MultiCropOptions o);

  /// Crop `crop` (0, 1 global; then local) of `sample_index` in `epoch`, for
  /// an image of h x w pixels and c channels: the box as torchvision's
  /// RandomResizedCrop.get_params, then flips and photometric draws.
  CropParams Params(int64_t epoch, int64_t sample_index, int64_t crop, int64_t h, int64_t w, int64_t c = 1) const;

  /// images: [B, C, H, W] in [0, 1] on the device (float32, or bf16 or
  /// float16 uploaded as such: converted to float32 there); indices: the
  /// samples' data-set positions; sizes: each sample's true h, w when
  /// images are padded to a common size (empty: all H x W). Returns
  /// 2 + local_crops_number crops, float32.
  std::vector<torch::Tensor> Apply(const torch::Tensor& images, const std::vector<int64_t>& indices, int64_t epoch,
                                   const std::vector<std::array<int64_t, 2>>& sizes = {}) const;

  const MultiCropOptions& options() const { return o_; }
  int64_t ncrops() const { return 2 + o_.local_crops_number; }

 private:
  /// The tensor-op path: params[crop][sample].
  std::vector<torch::Tensor> ApplyTensorOps(const torch::Tensor& images,
                                            const std::vector<std::vector<CropParams>>& params) const;
  /// The blur's taps for crops of `size` on `device`: [K, size * size], the
  /// weight of source pixel j for output pixel i under tap k (reflect
  /// padding folded in); made once per size and device.
  torch::Tensor BlurTaps(int64_t size, torch::Device device) const;

  MultiCropOptions o_;
  struct TapCache;
  std::shared_ptr<TapCache> taps_;  // shared by copies; guarded inside
};

/// `x` [N, C, S, S] blurred per image along both axes with that image's
/// kernel of K taps (kernels [N, K]; reflect padding), as the matrix
/// products taps ([K, S * S], MultiCropAugmenter's) make.
torch::Tensor SeparableBlur(const torch::Tensor& x, const torch::Tensor& kernels, const torch::Tensor& taps);

/// torchvision's GaussianBlur kernel of `k` taps for `sigma`.
std::vector<double> GaussianKernel(double sigma, int64_t k);

/// The fused CPU implementation of one crop for a batch: images [B, C, H, W]
/// float32 contiguous on the CPU, each sample cropped within its own
/// sizes[b] (or H x W). Resize is torchvision's bicubic (A = -0.75, taps
/// clamped to the crop box) and the blur (reflect padding) is folded into the
/// same separable weights, so it acts before the brightness clamp rather than
/// after it; brightness is a per-channel factor and commutes with the blur,
/// so only pixels saturated by brightness can differ.
torch::Tensor CropBatchFusedCpu(const torch::Tensor& images, const std::vector<CropParams>& params, int64_t size,
                                const std::vector<std::array<int64_t, 2>>& sizes, const MultiCropOptions& o);

}  // namespace scdino::data
