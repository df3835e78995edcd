// Multi-crop views of a batch of raw images as batched tensor operations on
// the training device: for each crop, one affine grid sample does the random
// resized crop and both flips for the whole batch. Every random parameter of
// a sample's crop derives from (seed, epoch, sample index, crop), so a crop
// does not depend on batch composition, thread count or world size.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
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
  uint64_t seed = 0;
  /// Per-channel normalisation applied last; empty: none.
  std::vector<double> mean, std;
};

/// Crop box in pixels of the source image plus flips.
struct CropParams {
  double top = 0, left = 0, height = 0, width = 0;
  bool hflip = false, vflip = false;
};

class MultiCropAugmenter {
 public:
  explicit MultiCropAugmenter(MultiCropOptions o);

  /// Crop `crop` (0, 1 global; then local) of `sample_index` in `epoch`, for
  /// an image of h x w pixels: torchvision's RandomResizedCrop.get_params.
  CropParams Params(int64_t epoch, int64_t sample_index, int64_t crop, int64_t h, int64_t w) const;

  /// images: [B, C, H, W] float in [0, 1] on the device; indices: the
  /// samples' data-set positions. Returns 2 + local_crops_number crops.
  std::vector<torch::Tensor> Apply(const torch::Tensor& images, const std::vector<int64_t>& indices,
                                   int64_t epoch) const;

  const MultiCropOptions& options() const { return o_; }
  int64_t ncrops() const { return 2 + o_.local_crops_number; }

 private:
  torch::Tensor CropBatch(const torch::Tensor& images, const std::vector<int64_t>& indices, int64_t epoch,
                          int64_t crop, int64_t size) const;
  MultiCropOptions o_;
};

}  // namespace scdino::data
