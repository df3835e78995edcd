// The interface between data and training: a source of multi-crop batches,
// positioned by (epoch, batch) so that a resumed run sees exactly the batches
// an uninterrupted one would. The in-memory source below and the file loader
// implement it.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "data/sampler.h"

namespace scdino::data {

/// One batch of multi-crop views for a DINO step.
struct MultiCropBatch {
  /// 2 global crops [B, C, G, G], then the local crops [B, C, L, L], on the
  /// training device.
  std::vector<torch::Tensor> crops;
  torch::Tensor labels;   ///< [B] int64 class indices (-1 when unknown)
  torch::Tensor indices;  ///< [B] int64 positions in the data set
};

/// Not thread-safe: the training loop calls it from one thread.
class MultiCropSource {
 public:
  virtual ~MultiCropSource() = default;
  /// Channels of every crop.
  virtual int64_t channels() const = 0;
  /// Batches this rank takes per epoch (drop_last: only full batches).
  virtual int64_t batches_per_epoch() const = 0;
  /// Images per batch on this rank.
  virtual int64_t batch_size() const = 0;
  /// Images the epochs are drawn from.
  virtual int64_t dataset_size() const = 0;
  /// Positions the source at `start` of `epoch` (batch 0 for a fresh
  /// epoch, more on resume; a position of its own on a resume with another
  /// global batch).
  virtual void StartEpoch(int64_t epoch, EpochStart start) = 0;
  /// Where an epoch resumed at permutation position `position` starts
  /// (EpochSampler::ResumeAt).
  virtual EpochStart ResumeAt(int64_t position) const = 0;
  /// The next batch of the current epoch, or nullopt at its end.
  virtual std::optional<MultiCropBatch> Next() = 0;
  /// What each epoch's order depends on besides the seed, epoch and data
  /// set (recorded in checkpoints: a resume inside an epoch needs the same).
  virtual std::string epoch_order() const { return "global"; }
  /// Class names, index = label (sorted).
  virtual std::vector<std::string> class_names() const = 0;
};

}  // namespace scdino::data
