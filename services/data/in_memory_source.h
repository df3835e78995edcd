// A MultiCropSource over decoded images held in memory (a [N, C, H, W]
// tensor): the epoch sampler picks each batch, the augmenter crops it on the
// training device.
// Not thread-safe: the training loop owns a source.
#pragma once

#include "data/multicrop.h"
#include "data/sampler.h"
#include "data/batch_source.h"

namespace scdino::data {

class InMemorySource : public MultiCropSource {
 public:
  /// images: [N, C, H, W] float in [0, 1] (CPU); labels: [N] int64.
  InMemorySource(torch::Tensor images, torch::Tensor labels, SamplerOptions sampler, MultiCropOptions crops,
                 torch::Device device = torch::kCPU, std::vector<std::string> class_names = {});

  int64_t channels() const override { return images_.size(1); }
  int64_t batches_per_epoch() const override { return sampler_.batches_per_epoch(); }
  int64_t dataset_size() const override { return images_.size(0); }
  int64_t batch_size() const override { return batch_size_; }
  void StartEpoch(int64_t epoch, EpochStart start) override;
  EpochStart ResumeAt(int64_t position) const override { return sampler_.ResumeAt(position); }
  std::optional<MultiCropBatch> Next() override;
  std::vector<std::string> class_names() const override { return class_names_; }

 private:
  torch::Tensor images_, labels_;
  EpochSampler sampler_;
  MultiCropAugmenter augmenter_;
  torch::Device device_;
  int64_t batch_size_;
  int64_t epoch_ = 0, next_batch_ = 0;
  std::vector<int64_t> epoch_indices_;
  std::vector<std::string> class_names_;
};

}  // namespace scdino::data
