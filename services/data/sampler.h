// Which images a rank takes in an epoch: a permutation of the data set seeded
// by (seed, epoch), then every world_size-th image from position rank. It
// does not depend on thread count or batch composition, so resume and
// different launch shapes see the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace scdino::data {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int64_t batch_size = 1;  ///< per rank
  int64_t rank = 0;
  int64_t world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  /// Only full batches; every rank gets the same number of batches.
  bool drop_last = true;
  /// 0: each epoch's order is a permutation of the whole set. > 0 (block
  /// shuffle, for packed sets read in blocks): the images in
  /// `storage_order` are cut into blocks of `block`; the blocks are
  /// permuted, then the images within each window of `window_blocks`
  /// consecutive blocks of that order. Each epoch is still a permutation of
  /// the set (every image once); a window's images come from window_blocks
  /// random blocks, in random order.
  int64_t block = 0;
  int64_t window_blocks = 1;
  /// Data-set indices in storage order (position -> index); null: 0..n-1.
  std::shared_ptr<const std::vector<int64_t>> storage_order;
};

/// Where an epoch's batches start. Batch `batch` (the first to run) takes
/// the epoch's permutation from `position` on, each later batch the next
/// global batch of positions. By default position = batch x global batch,
/// as an uninterrupted run has it; a run resumed with another global batch
/// (on another number of ranks, scdino.elastic_resume: batch_per_gpu)
/// starts at the position its checkpoint reached, so that every sample of
/// the epoch that was not trained on yet comes exactly once.
struct EpochStart {
  EpochStart(int64_t batch = 0, int64_t position = -1) : batch(batch), position(position) {}  // NOLINT: a batch
  int64_t batch = 0;
  int64_t position = -1;  ///< -1: batch x global batch
};

class EpochSampler {
 public:
  explicit EpochSampler(SamplerOptions o);
  int64_t batches_per_epoch() const;
  int64_t global_batch() const { return o_.batch_size * o_.world_size; }
  /// Data-set indices of batch `batch` of `epoch` for this rank.
  std::vector<int64_t> Batch(int64_t epoch, int64_t batch, EpochStart start = {}) const;
  /// This rank's indices for the whole epoch, in order (those of batches
  /// before `start.batch` are never taken).
  std::vector<int64_t> EpochIndices(int64_t epoch, EpochStart start = {}) const;
  /// The start of an epoch resumed at permutation position `position`:
  /// the batch to start with, so that the epoch's remaining full global
  /// batches end it (batches_per_epoch() of them from position 0).
  /// Throws std::invalid_argument naming the numbers when `position` is
  /// outside the data set.
  EpochStart ResumeAt(int64_t position) const;
  /// The epoch's order of the whole data set (a permutation), before it is
  /// dealt to the ranks.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

 private:
  SamplerOptions o_;
};

/// A 64-bit hash of several values (splitmix64 chain): the seed of every
/// per-sample random stream.
uint64_t MixSeed(std::initializer_list<uint64_t> values);

}  // namespace scdino::data
