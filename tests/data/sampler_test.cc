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

}  // namespace
}  // namespace scdino::data
