#include "data/sampler.h"

#include <gtest/gtest.h>

#include <set>

namespace scdino::data {
namespace {

TEST(EpochSampler, RanksTakeDisjointShardsOfOnePermutation) {
  SamplerOptions o;
  o.dataset_size = 103;
  o.batch_size = 5;
  o.world_size = 4;
  o.seed = 9;
  std::set<int64_t> all;
  for (int64_t r = 0; r < 4; ++r) {
    o.rank = r;
    EpochSampler s(o);
    EXPECT_EQ(s.batches_per_epoch(), 5);  // 25 per rank, drop_last
    auto idx = s.EpochIndices(2);
    EXPECT_EQ(idx.size(), 25u);
    for (auto i : idx) EXPECT_TRUE(all.insert(i).second) << "index " << i << " on two ranks";
    EXPECT_EQ(s.Batch(2, 1), std::vector<int64_t>(idx.begin() + 5, idx.begin() + 10));
  }
  EXPECT_EQ(all.size(), 100u);
}

TEST(EpochSampler, ABlockShuffleSeesEveryImageOnceAcrossRanksAndDrawsEachWindowFromItsBlocks) {
  // 1024 images stored in a scrambled order, blocks of 16, windows of 4
  // blocks (a shuffle buffer of 64 images).
  SamplerOptions o;
  o.dataset_size = 1024;
  o.batch_size = 8;
  o.world_size = 3;
  o.seed = 4;
  o.block = 16;
  o.window_blocks = 4;
  auto storage = std::make_shared<std::vector<int64_t>>(1024);
  for (int64_t i = 0; i < 1024; ++i) (*storage)[i] = (i * 389) % 1024;
  o.storage_order = storage;
  std::vector<int64_t> block_of(1024);
  for (int64_t p = 0; p < 1024; ++p) block_of[(*storage)[p]] = p / 16;
  for (int64_t epoch : {0, 1}) {
    EpochSampler s(o);
    const auto order = s.EpochOrder(epoch);
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 1024u);  // a permutation
    // Each window of 64 positions takes whole blocks (4 of them), shuffled:
    // the window's images come from exactly 4 blocks.
    for (size_t w = 0; w < 1024; w += 64) {
      std::set<int64_t> blocks;
      for (size_t k = w; k < w + 64; ++k) blocks.insert(block_of[order[k]]);
      EXPECT_EQ(blocks.size(), 4u) << "window at " << w;
    }
    EXPECT_NE(order, std::vector<int64_t>(storage->begin(), storage->end()));
    // Dealt to 3 ranks: no image twice in the epoch (341 each).
    std::set<int64_t> seen;
    for (int64_t r = 0; r < 3; ++r) {
      o.rank = r;
      for (auto i : EpochSampler(o).EpochIndices(epoch)) EXPECT_TRUE(seen.insert(i).second) << i;
    }
    o.rank = 0;
    EXPECT_EQ(seen.size(), 3u * 341);
  }
  EXPECT_NE(EpochSampler(o).EpochOrder(0), EpochSampler(o).EpochOrder(1));
  // Resume in the middle of an epoch: the same remaining batches.
  EpochSampler s(o);
  const auto full = s.EpochIndices(1);
  const auto rest = s.EpochIndices(1, 7);
  EXPECT_EQ(std::vector<int64_t>(full.begin() + 7 * 8, full.end()), std::vector<int64_t>(rest.begin() + 7 * 8, rest.end()));
}

TEST(EpochSampler, ShuffleDependsOnSeedAndEpochOnly) {
  SamplerOptions o;
  o.dataset_size = 50;
  o.batch_size = 10;
  EpochSampler a(o), b(o);
  EXPECT_EQ(a.EpochIndices(3), b.EpochIndices(3));
  EXPECT_NE(a.EpochIndices(3), a.EpochIndices(4));
  o.seed = 1;
  EXPECT_NE(EpochSampler(o).EpochIndices(3), a.EpochIndices(3));
  o.shuffle = false;
  EXPECT_EQ(EpochSampler(o).Batch(0, 1), (std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
}

TEST(EpochSampler, RejectsBadShapes) {
  SamplerOptions o;
  o.dataset_size = 10;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_THROW(EpochSampler{o}, std::invalid_argument);
  o.rank = 0;
  o.batch_size = 0;
  EXPECT_THROW(EpochSampler{o}, std::invalid_argument);
}

// The images of global batch `batch` of `epoch` over every rank.
std::multiset<int64_t> GlobalBatch(SamplerOptions o, int64_t epoch, int64_t batch, EpochStart start = {}) {
  std::multiset<int64_t> out;
  for (o.rank = 0; o.rank < o.world_size; ++o.rank) {
    for (auto i : EpochSampler(o).Batch(epoch, batch, start)) out.insert(i);
  }
  return out;
}

// A run on 2 ranks x 6 stopped inside an epoch goes on on 1, 3 or 4 ranks:
// with the global batch kept (12 = 1 x 12 = 3 x 4 = 4 x 3), every later
// step takes the very images of the uninterrupted run's; with the per-rank
// batch kept (3 x 6 = 18, 1 x 6), the epoch's images not trained on yet
// come exactly once, and none of those already trained on.
TEST(EpochSampler, AResumeOnAnotherWorldSizeTakesEachRemainingImageOnce) {
  SamplerOptions two;
  two.dataset_size = 100;
  two.batch_size = 6;
  two.world_size = 2;
  two.seed = 3;
  const int64_t epoch = 4, done = 3;  // 3 global batches of 12 trained on
  ASSERT_EQ(EpochSampler(two).batches_per_epoch(), 8);
  std::multiset<int64_t> trained;
  for (int64_t b = 0; b < done; ++b) {
    auto g = GlobalBatch(two, epoch, b);
    trained.insert(g.begin(), g.end());
  }
  for (auto [w, per_rank] : {std::pair<int64_t, int64_t>{1, 12}, {3, 4}, {4, 3}}) {
    SamplerOptions o = two;
    o.world_size = w;
    o.batch_size = per_rank;
    EXPECT_EQ(EpochSampler(o).ResumeAt(done * 12).batch, done);
    for (int64_t b = done; b < 8; ++b) {
      EXPECT_EQ(GlobalBatch(o, epoch, b), GlobalBatch(two, epoch, b)) << w << " ranks x " << per_rank << ", batch " << b;
    }
  }
  // The images the uninterrupted epoch would still take: positions 36-95
  // of its order, and the tail (96-99) no run of 12 takes.
  std::multiset<int64_t> rest;
  for (int64_t b = done; b < 8; ++b) {
    auto g = GlobalBatch(two, epoch, b);
    rest.insert(g.begin(), g.end());
  }
  for (auto [w, per_rank] : {std::pair<int64_t, int64_t>{3, 6}, {1, 6}, {4, 4}}) {
    SamplerOptions o = two;
    o.world_size = w;
    o.batch_size = per_rank;
    const EpochSampler s(o);
    const EpochStart start = s.ResumeAt(done * 12);
    const int64_t global = w * per_rank, remaining = (100 - done * 12) / global;
    EXPECT_EQ(start.batch, s.batches_per_epoch() - remaining) << w << " x " << per_rank;
    std::multiset<int64_t> seen;
    for (int64_t b = start.batch; b < s.batches_per_epoch(); ++b) {
      auto g = GlobalBatch(o, epoch, b, start);
      EXPECT_EQ(static_cast<int64_t>(g.size()), global);
      seen.insert(g.begin(), g.end());
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), remaining * global);
    for (auto i : seen) {
      EXPECT_EQ(seen.count(i), 1u) << "image " << i << " twice on " << w << " x " << per_rank;
      EXPECT_EQ(trained.count(i), 0u) << "image " << i << " was trained on before the stop";
    }
    // What the new global batch cannot fill (less than one batch) is what
    // the uninterrupted run's last batches took beyond it.
    EXPECT_LT(static_cast<int64_t>(rest.size() + 4) - static_cast<int64_t>(seen.size()), global);
  }
  SamplerOptions o = two;
  EXPECT_THROW(EpochSampler(o).ResumeAt(101), std::invalid_argument);
  EXPECT_THROW(EpochSampler(o).EpochIndices(0, EpochStart(0, 90)), std::invalid_argument);
}

}  // namespace
}  // namespace scdino::data
