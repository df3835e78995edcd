#include "data/sampler.h"

#include <algorithm>
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
  if (o_.block > 0 && o_.window_blocks < 1) {
    throw std::invalid_argument("a block shuffle needs window_blocks >= 1, got " + std::to_string(o_.window_blocks));
  }
  if (o_.storage_order && static_cast<int64_t>(o_.storage_order->size()) != o_.dataset_size) {
    throw std::invalid_argument("storage order of " + std::to_string(o_.storage_order->size()) +
                                " images for a data set of " + std::to_string(o_.dataset_size));
  }
}

int64_t EpochSampler::batches_per_epoch() const {
  const int64_t per_rank = o_.dataset_size / o_.world_size;
  return o_.drop_last ? per_rank / o_.batch_size : (per_rank + o_.batch_size - 1) / o_.batch_size;
}

namespace {

template <typename T>
void Shuffle(T* first, int64_t n, std::mt19937_64& rng) {
  for (int64_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(first[i], first[pick(rng)]);
  }
}

}  // namespace

std::vector<int64_t> EpochSampler::EpochOrder(int64_t epoch) const {
  const int64_t n = o_.dataset_size;
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = o_.storage_order ? (*o_.storage_order)[i] : i;
  if (!o_.shuffle) return perm;
  if (o_.block <= 0) {
    std::mt19937_64 rng(MixSeed({o_.seed, static_cast<uint64_t>(epoch), 0x5eedull}));
    Shuffle(perm.data(), n, rng);
    return perm;
  }
  // Block shuffle: the blocks in a seeded order, then each window of
  // window_blocks blocks shuffled within.
  const int64_t blocks = (n + o_.block - 1) / o_.block;
  std::vector<int64_t> block_order(blocks);
  for (int64_t b = 0; b < blocks; ++b) block_order[b] = b;
  std::mt19937_64 rng(MixSeed({o_.seed, static_cast<uint64_t>(epoch), 0xb10cull}));
  Shuffle(block_order.data(), blocks, rng);
  std::vector<int64_t> out;
  out.reserve(n);
  for (int64_t w = 0; w * o_.window_blocks < blocks; ++w) {
    const size_t begin = out.size();
    for (int64_t k = w * o_.window_blocks; k < std::min(blocks, (w + 1) * o_.window_blocks); ++k) {
      const int64_t b = block_order[k];
      out.insert(out.end(), perm.begin() + b * o_.block, perm.begin() + std::min(n, (b + 1) * o_.block));
    }
    std::mt19937_64 within(MixSeed({o_.seed, static_cast<uint64_t>(epoch), 0xb0ffull, static_cast<uint64_t>(w)}));
    Shuffle(out.data() + begin, static_cast<int64_t>(out.size() - begin), within);
  }
  return out;
}

std::vector<int64_t> EpochSampler::EpochIndices(int64_t epoch, EpochStart start) const {
  const std::vector<int64_t> perm = EpochOrder(epoch);
  // The rank's k-th sample of batch j sits at position first + (j - start.batch) x global
  // batch + k x world size + rank: from position 0 and batch 0, every
  // world_size-th position from the rank's own.
  // Only full batches move (drop_last: all of them).
  const int64_t global = global_batch(), niter = o_.dataset_size / o_.world_size / o_.batch_size;
  const int64_t first = start.position < 0 ? start.batch * global : start.position;
  if (start.batch < 0 || first + (niter - start.batch) * global > o_.dataset_size) {
    throw std::invalid_argument("an epoch cannot start at batch " + std::to_string(start.batch) + " and position " +
                                std::to_string(first) + ": " + std::to_string(niter - start.batch) +
                                " global batches of " + std::to_string(global) + " from there pass the " +
                                std::to_string(o_.dataset_size) + " images");
  }
  std::vector<int64_t> mine;
  const int64_t per_rank = o_.dataset_size / o_.world_size;
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t batch = k / o_.batch_size;
    const int64_t pos = batch >= start.batch && batch < niter
                            ? first + (batch - start.batch) * global + (k % o_.batch_size) * o_.world_size + o_.rank
                            : k * o_.world_size + o_.rank;
    mine.push_back(perm[pos]);
  }
  return mine;
}

EpochStart EpochSampler::ResumeAt(int64_t position) const {
  if (position < 0 || position > o_.dataset_size) {
    throw std::invalid_argument("an epoch cannot resume at position " + std::to_string(position) + " of " +
                                std::to_string(o_.dataset_size) + " images");
  }
  const int64_t remaining = std::min((o_.dataset_size - position) / global_batch(), batches_per_epoch());
  return EpochStart(batches_per_epoch() - remaining, position);
}

std::vector<int64_t> EpochSampler::Batch(int64_t epoch, int64_t batch, EpochStart start) const {
  if (batch < 0 || batch >= batches_per_epoch()) {
    throw std::out_of_range("batch " + std::to_string(batch) + " of an epoch of " +
                            std::to_string(batches_per_epoch()) + " batches");
  }
  auto all = EpochIndices(epoch, start);
  const auto begin = all.begin() + batch * o_.batch_size;
  const auto end = std::min(all.end(), begin + o_.batch_size);
  return std::vector<int64_t>(begin, end);
}

}  // namespace scdino::data
