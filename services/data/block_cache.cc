#include "data/block_cache.h"

#include <algorithm>

namespace scdino::data {
namespace {

int64_t MaxBlockBytes(const PackedSet& set) {
  int64_t most = 0;
  for (int64_t b = 0; b < set.blocks(); ++b) {
    const auto [begin, end] = set.BlockRange(b);
    most = std::max(most, end - begin);
  }
  return most;
}

}  // namespace

size_t BlockCache::Capacity(const PackedSet& set, int64_t block, int64_t window_blocks, int64_t in_flight,
                            int64_t world_size, int64_t max_bytes, std::string* plan) {
  const int64_t window = window_blocks * block;
  const int64_t windows = (in_flight + window - 1) / window + 2;
  const int64_t block_bytes = MaxBlockBytes(set);
  const int64_t wanted = windows * window_blocks;
  const auto mib = [](int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; };
  if (wanted * block_bytes <= max_bytes) {
    *plan = "read in blocks of " + std::to_string(set.block_samples()) + " images, at most " + std::to_string(wanted) +
            " blocks (" + mib(wanted * block_bytes) + ") held per rank";
    return static_cast<size_t>(wanted);
  }
  *plan = "read image by image: the blocks of the windows in flight at " + std::to_string(world_size) + " rank(s) (" +
          std::to_string(wanted) + " of up to " + mib(block_bytes) + ", " + mib(wanted * block_bytes) +
          ") exceed the bound of " + mib(max_bytes) + " (scdino.block_cache_mb; a smaller scdino.shuffle_buffer needs less)";
  return 0;
}

BlockCache::BlockCache(const PackedSet& set, size_t capacity, int64_t read_ahead)
    : set_(set), capacity_(capacity), read_ahead_(read_ahead), max_block_bytes_(MaxBlockBytes(set)) {}

void BlockCache::SetOrder(const std::vector<int64_t>& indices, size_t from) {
  std::vector<int64_t> sequence;
  std::unordered_map<int64_t, size_t> place;
  const auto& entries = set_.entries();
  for (size_t k = from; k < indices.size(); ++k) {
    const int64_t block = entries[indices[k]].position / set_.block_samples();
    if (place.emplace(block, sequence.size()).second) sequence.push_back(block);
  }
  std::lock_guard<std::mutex> l(mu_);
  sequence_ = std::move(sequence);
  place_ = std::move(place);
}

StatusOr<RawImage> BlockCache::Read(int64_t index) {
  const int64_t block = set_.entries()[index].position / set_.block_samples();
  auto bytes = Fetch(block);
  if (!bytes.ok()) return bytes.status();
  return set_.DecodeFromBlock(index, **bytes, block);
}

StatusOr<std::shared_ptr<const std::string>> BlockCache::Fetch(int64_t block) {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return loading_.count(block) == 0; });
    if (auto it = blocks_.find(block); it != blocks_.end()) {
      lru_.erase(std::find(lru_.begin(), lru_.end(), block));
      lru_.push_back(block);
      return it->second;
    }
    loading_.insert(block);
    // The next blocks this rank needs, read ahead by the kernel.
    if (auto at = place_.find(block); at != place_.end()) {
      const size_t end = std::min(sequence_.size(), at->second + 1 + static_cast<size_t>(read_ahead_));
      for (size_t j = at->second + 1; j < end; ++j) {
        if (!blocks_.count(sequence_[j])) set_.WillNeed(sequence_[j]);
      }
    }
  }
  StatusOr<std::shared_ptr<const std::string>> read = Status::Internal("block " + std::to_string(block) + " not read");
  try {
    read = set_.ReadBlock(block);
  } catch (...) {
    // No memory for the block: the others waiting for it must not wait forever.
    std::lock_guard<std::mutex> l(mu_);
    loading_.erase(block);
    cv_.notify_all();
    throw;
  }
  std::lock_guard<std::mutex> l(mu_);
  loading_.erase(block);
  cv_.notify_all();
  if (!read.ok()) return read.status();
  blocks_[block] = *read;
  lru_.push_back(block);
  while (lru_.size() > capacity_) {
    blocks_.erase(lru_.front());
    lru_.erase(lru_.begin());
  }
  return read;
}

torch::Tensor ImageCache::Find(int64_t index) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = images_.find(index);
  return it != images_.end() ? it->second : torch::Tensor();
}

void ImageCache::Insert(int64_t index, const torch::Tensor& image) {
  const int64_t bytes = image.numel() * image.element_size();
  std::lock_guard<std::mutex> l(mu_);
  if (bytes_ + bytes <= max_bytes_ && images_.emplace(index, image).second) bytes_ += bytes;
}

}  // namespace scdino::data
