#include "data/loader.h"

#include <chrono>
#include <algorithm>
#include <iostream>

#include "common/parallel.h"

namespace scdino::data {

FileLoader::FileLoader(Dataset dataset, LoaderOptions options, torch::Device device)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      sampler_([&] {
        auto s = options_.sampler;
        s.dataset_size = static_cast<int64_t>(dataset_.entries.size());
        return s;
      }()),
      augmenter_(options_.crops),
      device_(device),
      streams_(options_.streams ? options_.streams : DeviceStreams()) {
  if (sampler_.batches_per_epoch() <= 0) {
    ThrowIfError(Status::InvalidArgument(
        "data set " + dataset_.root + " has " + std::to_string(dataset_.entries.size()) +
        " images: no full batch of " + std::to_string(options_.sampler.batch_size) + " per rank for " +
        std::to_string(options_.sampler.world_size) + " rank(s)"));
  }
  if (options_.cache) images_ = std::make_unique<ImageCache>(options_.cache_max_bytes);
  // The channel count after selection, from the first readable image.
  channels_ = static_cast<int64_t>(options_.prep.channels.size());
  if (channels_ == 0) {
    for (size_t i = 0; i < dataset_.entries.size() && channels_ == 0; ++i) {
      auto img = LoadOne(static_cast<int64_t>(i));
      if (img.ok()) channels_ = img->size(0);
      else if (options_.on_bad_image == BadImagePolicy::kFail) ThrowIfError(img.status());
    }
  }
  if (dataset_.packed && options_.sampler.block > 0) {
    // The images of the batches being loaded or waiting, over every rank
    // (with many ranks a rank's batches cross windows sooner).
    const auto& so = options_.sampler;
    const int64_t in_flight = (options_.prefetch + std::max(1, options_.threads)) * so.batch_size * so.world_size;
    const size_t capacity = BlockCache::Capacity(*dataset_.packed, so.block, so.window_blocks, in_flight,
                                                 so.world_size, options_.block_cache_max_bytes, &read_plan_);
    if (capacity > 0) blocks_ = std::make_unique<BlockCache>(*dataset_.packed, capacity, so.window_blocks);
  } else if (dataset_.packed) {
    read_plan_ = "read image by image (shuffle: global)";
  }
  const int n = std::max(1, options_.threads);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this, i] { Worker(i); });
}

FileLoader::~FileLoader() { StopWorkers(); }

std::string FileLoader::epoch_order() const {
  const auto& so = options_.sampler;
  if (so.block <= 0) return "global";
  return "blocks of " + std::to_string(so.block) + " in windows of " + std::to_string(so.window_blocks) +
         (dataset_.packed ? " of packed set " + dataset_.packed->content_fingerprint() : std::string());
}

void FileLoader::StopWorkers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void FileLoader::StartEpoch(int64_t epoch, EpochStart start) {
  const int64_t niter = sampler_.batches_per_epoch();
  {
    // The epoch that follows the one consumed to its end, from its start:
    // what the workers already loaded of it is kept.
    std::lock_guard<std::mutex> l(mu_);
    if (started_ && epoch == epoch_ + 1 && start.batch == 0 && start.position < 0 && next_to_take_ == epoch * niter &&
        epoch_indices_.count(epoch)) {
      epoch_indices_.erase(epoch_);
      epoch_ = epoch;
      cv_.notify_all();
      return;
    }
  }
  auto indices = sampler_.EpochIndices(epoch, start);
  if (blocks_) blocks_->SetOrder(indices, static_cast<size_t>(start.batch * options_.sampler.batch_size));
  std::lock_guard<std::mutex> l(mu_);
  started_ = true;
  epoch_ = epoch;
  epoch_indices_.clear();
  epoch_indices_[epoch] = std::move(indices);
  next_to_load_ = next_to_take_ = epoch * niter + start.batch;
  ready_.clear();
  ++generation_;  // batches still being loaded for the old order are dropped
  cv_.notify_all();
}

StatusOr<torch::Tensor> FileLoader::LoadOne(int64_t index) {
  if (images_) {
    if (auto held = images_->Find(index); held.defined()) return held;
  }
  StatusOr<torch::Tensor> img = Status::Internal("not read");
  if (dataset_.packed) {
    auto raw = blocks_ ? blocks_->Read(index) : dataset_.packed->Read(index);
    img = raw.ok() ? PrepareImage(*raw, options_.prep, dataset_.entries[index].path) : raw.status();
  } else {
    img = options_.read(dataset_.entries[index].path, options_.prep);
  }
  if (img.ok() && images_) images_->Insert(index, *img);
  return img;
}

void FileLoader::NoteSkipped(const Status& why, const std::string& path) {
  std::lock_guard<std::mutex> l(bad_mu_);
  if (logged_bad_.insert(path).second) std::cerr << "scdino: skipping bad image: " << why.message() << "\n";
}

FileLoader::RawBatch FileLoader::Load(const std::vector<int64_t>& indices) {
  torch::InferenceMode guard;
  RawBatch b;
  std::vector<torch::Tensor> images;
  int64_t hmax = 0, wmax = 0;
  for (int64_t idx : indices) {
    auto img = LoadOne(idx);
    if (img.ok() && channels_ > 0 && img->size(0) != channels_) {
      img = Status::InvalidArgument(dataset_.entries[idx].path + ": has " + std::to_string(img->size(0)) +
                                    " channel(s) after selection, the data set's first image has " +
                                    std::to_string(channels_));
    }
    if (!img.ok()) {
      if (options_.on_bad_image == BadImagePolicy::kFail) {
        b.error = img.status();
        return b;
      }
      ++b.skipped;
      NoteSkipped(img.status(), dataset_.entries[idx].path);
      continue;
    }
    hmax = std::max(hmax, img->size(1));
    wmax = std::max(wmax, img->size(2));
    images.push_back(*img);
    b.indices.push_back(idx);
  }
  if (images.empty()) {
    b.error = Status::DataLoss("every image of a batch was bad (first: " +
                               dataset_.entries[indices.front()].path + ")");
    return b;
  }
  // Pad to a common size by repeating edge pixels; each sample keeps its
  // true size so crops stay inside its own pixels.
  for (auto& img : images) {
    b.sizes.push_back({img.size(1), img.size(2)});
    if (img.size(1) != hmax || img.size(2) != wmax) {
      img = torch::nn::functional::pad(img.unsqueeze(0),
                                       torch::nn::functional::PadFuncOptions({0, wmax - img.size(2), 0, hmax - img.size(1)})
                                           .mode(torch::kReplicate))
                .squeeze(0);
    }
  }
  b.images = torch::stack(images);
  // For a GPU: in the upload's dtype, page-locked (the copy is then
  // asynchronous), here on the worker thread rather than in the training loop.
  if (device_.is_cuda()) b.images = b.images.to(options_.upload_dtype).pin_memory();
  return b;
}

void FileLoader::Worker(int worker) {
  SerialOnThisThread();
  const int64_t niter = sampler_.batches_per_epoch();
  const int64_t bs = options_.sampler.batch_size;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    // Up to `prefetch` batches ahead of the one taken, into the next epoch.
    cv_.wait(l, [&] {
      return stopping_ ||
             (started_ && next_to_load_ < next_to_take_ + options_.prefetch && next_to_load_ < (epoch_ + 2) * niter);
    });
    if (stopping_) return;
    const int64_t key = next_to_load_++;
    const int64_t gen = generation_;
    const int64_t epoch = key / niter, k = key % niter;
    if (!epoch_indices_.count(epoch)) epoch_indices_[epoch] = sampler_.EpochIndices(epoch, EpochStart(0));
    const auto& order = epoch_indices_.at(epoch);
    std::vector<int64_t> idx(order.begin() + k * bs, order.begin() + (k + 1) * bs);
    l.unlock();
    RawBatch b;
    // An exception must not leave a worker thread (std::terminate): it
    // becomes the batch's error, which Next() reports.
    try {
      b = Load(idx);
      if (b.error.ok()) {
        // Not InferenceMode: the model's first layer saves the crops for
        // its backward pass, which inference tensors refuse.
        b.crops = StreamHandoff::Make(device_, worker, *streams_, [&] {
          torch::NoGradGuard no_grad;
          const auto images = device_.is_cpu() ? b.images : b.images.to(device_, /*non_blocking=*/true);
          return augmenter_.Apply(images, b.indices, epoch, b.sizes);
        });
        b.images = torch::Tensor();
      }
    } catch (const c10::OutOfMemoryError&) {
      // The device's allocator (the crops are cut on the GPU): the trainer
      // reports it as out of memory with the settings to lower, so it
      // travels as it is.
      b.device_oom = std::current_exception();
    } catch (const std::bad_alloc&) {
      b.error = Status::Internal("out of memory while loading batch " + std::to_string(k) + " (first image " +
                                 dataset_.entries[idx.front()].path + "); lower scdino.cache_max_mb, "
                                 "scdino.prefetch_batches or train_scDINO.num_workers");
    } catch (const std::exception& e) {
      b.error = Status::Internal("loading batch " + std::to_string(k) + " (first image " +
                                 dataset_.entries[idx.front()].path + ") failed: " + e.what());
    }
    l.lock();
    if (gen == generation_) ready_.emplace(key, std::move(b));
    cv_.notify_all();
  }
}

std::optional<MultiCropBatch> FileLoader::Next() {
  RawBatch raw;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (next_to_take_ >= (epoch_ + 1) * sampler_.batches_per_epoch()) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(l, [&] { return ready_.count(next_to_take_) > 0; });
    queue_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    raw = std::move(ready_.at(next_to_take_));
    ready_.erase(next_to_take_);
    ++next_to_take_;
  }
  cv_.notify_all();
  if (raw.device_oom) std::rethrow_exception(raw.device_oom);
  ThrowIfError(raw.error);
  skipped_count_ += raw.skipped;
  MultiCropBatch b;
  b.crops = raw.crops.Take(*streams_);
  std::vector<int64_t> labels;
  for (int64_t i : raw.indices) labels.push_back(dataset_.entries[i].label);
  b.labels = torch::tensor(labels, torch::kInt64);
  b.indices = torch::tensor(raw.indices, torch::kInt64);
  return b;
}

}  // namespace scdino::data
