#include "data/in_memory_source.h"

namespace scdino::data {

InMemorySource::InMemorySource(torch::Tensor images, torch::Tensor labels, SamplerOptions sampler,
                               MultiCropOptions crops, torch::Device device, std::vector<std::string> class_names)
    : images_(std::move(images)),
      labels_(std::move(labels)),
      sampler_([&] {
        sampler.dataset_size = images_.size(0);
        return sampler;
      }()),
      augmenter_(std::move(crops)),
      device_(device),
      batch_size_(sampler.batch_size),
      class_names_(std::move(class_names)) {
  TORCH_CHECK(images_.dim() == 4, "in-memory images must be [N, C, H, W], got ", images_.sizes());
  TORCH_CHECK(labels_.dim() == 1 && labels_.size(0) == images_.size(0), "expected ", images_.size(0),
              " labels, got ", labels_.sizes());
  TORCH_CHECK(sampler_.batches_per_epoch() > 0, "data set of ", images_.size(0), " images gives no full batch of ",
              batch_size_, " per rank");
}

void InMemorySource::StartEpoch(int64_t epoch, EpochStart start) {
  epoch_ = epoch;
  next_batch_ = start.batch;
  epoch_indices_ = sampler_.EpochIndices(epoch, start);
}

std::optional<MultiCropBatch> InMemorySource::Next() {
  if (next_batch_ >= batches_per_epoch()) return std::nullopt;
  std::vector<int64_t> idx(epoch_indices_.begin() + next_batch_ * batch_size_,
                           epoch_indices_.begin() + (next_batch_ + 1) * batch_size_);
  ++next_batch_;
  auto index = torch::tensor(idx, torch::kInt64);
  MultiCropBatch b;
  auto batch = images_.index_select(0, index);
  // Page-locked for a GPU, so the copy is asynchronous.
  if (device_.is_cuda()) batch = batch.pin_memory();
  b.crops = augmenter_.Apply(batch.to(device_, /*non_blocking=*/true), idx, epoch_);
  b.labels = labels_.index_select(0, index);
  b.indices = index;
  return b;
}

}  // namespace scdino::data
