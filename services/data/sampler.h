// Which images a rank takes in an epoch: a permutation of the data set seeded
// by (seed, epoch), then every world_size-th image from position rank. It
// does not depend on thread count or batch composition, so resume and
// different launch shapes see the same order.
#pragma once

#include <cstdint>
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
};

class EpochSampler {
 public:
  explicit EpochSampler(SamplerOptions o);
  int64_t batches_per_epoch() const;
  /// Data-set indices of batch `batch` of `epoch` for this rank.
  std::vector<int64_t> Batch(int64_t epoch, int64_t batch) const;
  /// This rank's indices for the whole epoch, in order.
  std::vector<int64_t> EpochIndices(int64_t epoch) const;

 private:
  SamplerOptions o_;
};

/// A 64-bit hash of several values (splitmix64 chain): the seed of every
/// per-sample random stream.
uint64_t MixSeed(std::initializer_list<uint64_t> values);

}  // namespace scdino::data
