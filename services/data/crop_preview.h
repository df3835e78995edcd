// What the augmentation recipe does to a cell, for a person to look at: one
// image and the crops MultiCropAugmenter makes of it, as one PNG. The
// trainer writes it at the start of a run (<run_dir>/crops_preview.png) and
// the evaluation report shows it, so a recipe whose crops miss the cell or
// blur it away is seen before hours of training.
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"
#include "data/dataset.h"
#include "data/multicrop.h"
#include "data/synthetic.h"

namespace scdino::data {

/// The crops of `image` ([C, H, W] float in [0, 1], as prepared for
/// training) that `options` makes for data-set position `index` in epoch 0,
/// without the normalisation: [C, rows] of grey tiles, one row per channel;
/// the columns are the image (scaled to the global crop's side), then the 2
/// global crops and the local crops, each at its own size, 4 px apart on
/// white. Returns the picture as [rows, cols] uint8.
torch::Tensor CropPreview(const torch::Tensor& image, MultiCropOptions options, int64_t index = 0);

/// CropPreview written as a PNG at `path` (atomically), each pixel repeated
/// the whole number of times that brings it nearest 640 px wide (from
/// below; 1 for wider pictures); errors name the path.
Status WriteCropPreview(const std::string& path, const torch::Tensor& image, const MultiCropOptions& options,
                        int64_t index = 0);

/// The picture of a run's data, WriteCropPreview'd at `path` (its folder
/// made): the first of the first 8 entries of `dataset` that loads with
/// `prep` or, with `synthetic`, the synthetic set's first cell (its
/// `prep.channels`). NotFound when none of those images loads.
Status WriteDataCropPreview(const std::string& path, const Dataset& dataset, const ImagePrep& prep,
                            const MultiCropOptions& options, const SyntheticOptions* synthetic = nullptr);

}  // namespace scdino::data
