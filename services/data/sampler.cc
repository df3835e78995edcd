#include "data/sampler.h"

#include <random>
#include <stdexcept>
#include <string>

namespace scdino::data {

uint64_t MixSeed(std::initializer_list<uint64_t> values) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v : values) {
    uint64_t z = h + v + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
  }
  return h;
}

EpochSampler::EpochSampler(SamplerOptions o) : o_(o) {
  if (o_.world_size < 1 || o_.rank < 0 || o_.rank >= o_.world_size) {
    throw std::invalid_argument("rank " + std::to_string(o_.rank) + " is outside world size " +
                                std::to_string(o_.world_size));
  }
  if (o_.batch_size < 1) throw std::invalid_argument("batch size must be >= 1, got " + std::to_string(o_.batch_size));
}

int64_t EpochSampler::batches_per_epoch() const {
  const int64_t per_rank = o_.dataset_size / o_.world_size;
  return o_.drop_last ? per_rank / o_.batch_size : (per_rank + o_.batch_size - 1) / o_.batch_size;
}

std::vector<int64_t> EpochSampler::EpochIndices(int64_t epoch) const {
  std::vector<int64_t> perm(o_.dataset_size);
  for (int64_t i = 0; i < o_.dataset_size; ++i) perm[i] = i;
  if (o_.shuffle) {
    std::mt19937_64 rng(MixSeed({o_.seed, static_cast<uint64_t>(epoch), 0x5eedull}));
    for (int64_t i = o_.dataset_size - 1; i > 0; --i) {
      std::uniform_int_distribution<int64_t> pick(0, i);
      std::swap(perm[i], perm[pick(rng)]);
    }
  }
  std::vector<int64_t> mine;
  const int64_t per_rank = o_.dataset_size / o_.world_size;
  for (int64_t k = 0; k < per_rank; ++k) mine.push_back(perm[k * o_.world_size + o_.rank]);
  return mine;
}

std::vector<int64_t> EpochSampler::Batch(int64_t epoch, int64_t batch) const {
  if (batch < 0 || batch >= batches_per_epoch()) {
    throw std::out_of_range("batch " + std::to_string(batch) + " of an epoch of " +
                            std::to_string(batches_per_epoch()) + " batches");
  }
  auto all = EpochIndices(epoch);
  const auto begin = all.begin() + batch * o_.batch_size;
  const auto end = std::min(all.end(), begin + o_.batch_size);
  return std::vector<int64_t>(begin, end);
}

}  // namespace scdino::data
