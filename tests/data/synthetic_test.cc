#include "data/synthetic.h"

#include <gtest/gtest.h>

#include "data/in_memory_source.h"

namespace scdino::data {
namespace {

// Separation of the classes' mean channel intensities over the spread within
// a class, the smallest over class pairs.
double Separation(const SyntheticOptions& o) {
  auto feats = MakeSyntheticSet(o).images.mean({2, 3});
  std::vector<torch::Tensor> means;
  double within = 0;
  for (int64_t k = 0; k < o.classes; ++k) {
    auto f = feats.slice(0, k * o.per_class, (k + 1) * o.per_class);
    means.push_back(f.mean(0));
    within = std::max(within, f.std(0).max().item<double>());
  }
  double worst = 1e30;
  for (int64_t a = 0; a < o.classes; ++a)
    for (int64_t b = a + 1; b < o.classes; ++b)
      worst = std::min(worst, (means[a] - means[b]).abs().max().item<double>() / within);
  return worst;
}

TEST(SyntheticCells, DeterministicBoundedAndClassDependent) {
  SyntheticOptions o;
  o.classes = 3;
  o.per_class = 20;
  o.channels = 4;
  o.size = 32;
  auto set = MakeSyntheticSet(o);
  EXPECT_EQ(set.images.sizes(), (std::vector<int64_t>{60, 4, 32, 32}));
  EXPECT_GE(set.images.min().item<float>(), 0.0f);
  EXPECT_LE(set.images.max().item<float>(), 1.0f);
  EXPECT_TRUE(SyntheticCell(o, 1, 5).equal(set.images[25]));
  EXPECT_FALSE(SyntheticCell(o, 1, 5).equal(SyntheticCell(o, 1, 6)));
  // Per-class mean channel intensities lie far apart compared with the spread
  // within a class: the classes are separable.
  EXPECT_GT(Separation(o), 3.0);
}

TEST(SyntheticCells, DifficultyBringsTheClassesTogether) {
  SyntheticOptions o;
  o.classes = 4;
  o.per_class = 32;
  o.channels = 5;
  o.size = 32;
  const double easy = Separation(o);
  o.difficulty = 0.6;
  const double hard = Separation(o);
  o.difficulty = 1.0;
  const double hardest = Separation(o);
  EXPECT_GT(easy, 2 * hard) << easy << " vs " << hard;
  EXPECT_GT(hard, hardest);
  // Still the same deterministic cells for the same options.
  EXPECT_TRUE(SyntheticCell(o, 2, 3).equal(SyntheticCell(o, 2, 3)));
}

TEST(InMemorySource, EpochOfBatchesAndResumePosition) {
  SyntheticOptions o;
  o.classes = 2;
  o.per_class = 10;
  o.channels = 2;
  o.size = 16;
  auto set = MakeSyntheticSet(o);
  SamplerOptions s;
  s.batch_size = 3;
  MultiCropOptions c;
  c.global_size = 8;
  c.local_size = 8;
  c.local_crops_number = 1;
  InMemorySource src(set.images, set.labels, s, c);
  EXPECT_EQ(src.batches_per_epoch(), 6);
  src.StartEpoch(1, 0);
  std::vector<MultiCropBatch> batches;
  while (auto b = src.Next()) batches.push_back(*b);
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(batches[0].crops.size(), 3u);
  EXPECT_TRUE(batches[2].labels.equal(set.labels.index_select(0, batches[2].indices)));
  src.StartEpoch(1, 4);  // resume inside the epoch
  auto b4 = src.Next();
  ASSERT_TRUE(b4.has_value());
  EXPECT_TRUE(b4->indices.equal(batches[4].indices));
  EXPECT_TRUE(b4->crops[2].equal(batches[4].crops[2]));
}

}  // namespace
}  // namespace scdino::data
