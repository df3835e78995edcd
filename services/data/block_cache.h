// The blocks of a packed data set held in memory while a block shuffle
// reads them (data/loader.h): each block read whole with one read, kept
// least recently used first up to a count, the next blocks of this rank's
// epoch order read ahead by the kernel on a miss, and a block being read by
// one thread waited for by the others rather than read twice.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

#include "common/status.h"
#include "data/packed.h"

namespace scdino::data {

class BlockCache {
 public:
  /// How many blocks of `set` a loader holds for `in_flight` images (the
  /// batches being loaded and waiting, over every rank) under a block
  /// shuffle of `block` images a block and `window_blocks` blocks a window:
  /// the blocks of every window those reach, plus one; 0 when they would
  /// take more than `max_bytes`. `plan` says how the set is read, and why,
  /// with the figures.
  static size_t Capacity(const PackedSet& set, int64_t block, int64_t window_blocks, int64_t in_flight,
                         int64_t world_size, int64_t max_bytes, std::string* plan);

  /// Holds at most `capacity` blocks of `set` (which must outlive it); a
  /// miss reads ahead the next `read_ahead` blocks of the order.
  BlockCache(const PackedSet& set, size_t capacity, int64_t read_ahead);

  /// The epoch's order: the data set's `indices` from `from` on, in the
  /// order this rank takes them.
  void SetOrder(const std::vector<int64_t>& indices, size_t from);
  /// Image `index`, decoded from its block (read when it is not held).
  StatusOr<RawImage> Read(int64_t index);
  /// The most bytes the blocks held may take.
  int64_t max_bytes() const { return static_cast<int64_t>(capacity_) * max_block_bytes_; }

 private:
  StatusOr<std::shared_ptr<const std::string>> Fetch(int64_t block);

  // Constant after construction.
  const PackedSet& set_;
  const size_t capacity_;
  const int64_t read_ahead_;
  int64_t max_block_bytes_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;  // a block's read ended (loading_ lost it)
  // Guarded by mu_: the blocks held, those being read, least recently used
  // first; this rank's blocks of the epoch in the order it first needs
  // them, and each block's place in it.
  std::map<int64_t, std::shared_ptr<const std::string>> blocks_;
  std::set<int64_t> loading_;
  std::vector<int64_t> lru_;
  std::vector<int64_t> sequence_;
  std::unordered_map<int64_t, size_t> place_;
};

/// Decoded, preprocessed images kept in memory up to a byte bound; once
/// full it keeps what it holds (no eviction churn) and the rest is decoded
/// again. Thread-safe.
class ImageCache {
 public:
  explicit ImageCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  /// The image held for `index`, or an undefined tensor.
  torch::Tensor Find(int64_t index);
  void Insert(int64_t index, const torch::Tensor& image);

 private:
  const int64_t max_bytes_;
  std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<int64_t, torch::Tensor> images_;
  int64_t bytes_ = 0;
};

}  // namespace scdino::data
