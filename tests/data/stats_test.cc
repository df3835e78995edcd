#include "data/stats.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/files.h"
#include "data/image_io.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

Dataset WriteSet(const std::string& root, int n) {
  Dataset d;
  d.root = root;
  d.classes = {"c"};
  std::filesystem::create_directories(root + "/c");
  for (int i = 0; i < n; ++i) {
    auto img = torch::randint(0, 256, {6 + i % 3, 7, 4}, torch::kInt32).to(torch::kUInt8);
    const std::string p = root + "/c/" + std::to_string(i) + ".tif";
    EXPECT_TRUE(WriteTiff(p, img).ok());
    d.entries.push_back({p, 0});
  }
  return d;
}

TEST(ChannelStats, MatchesADirectComputation) {
  scdino::testing::ScratchDir dir;
  auto d = WriteSet(dir.path(), 20);
  ImagePrep prep;
  prep.channels = {3, 1};
  StatsOptions o;
  o.fraction = 1.0;
  o.threads = 3;
  auto s = ComputeChannelStats(d, prep, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // Direct: every pixel of every preprocessed image, in one double tensor.
  std::vector<torch::Tensor> pix;
  for (const auto& e : d.entries) pix.push_back(LoadImage(e.path, prep)->to(torch::kFloat64).reshape({2, -1}));
  auto all = torch::cat(pix, 1);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(s->mean[c], all[c].mean().item<double>(), 1e-12);
    EXPECT_NEAR(s->std[c], all[c].std(/*unbiased=*/false).item<double>(), 1e-9);
  }
  EXPECT_EQ(s->images, 20);
  EXPECT_EQ(s->channels, prep.channels);
  // The histograms: torch.histc's bins over [0, 1], every pixel counted once.
  ASSERT_EQ(s->histogram.size(), 2u);
  for (int c = 0; c < 2; ++c) {
    auto direct = torch::histc(all[c], kIntensityBins, 0, 1).to(torch::kInt64);
    ASSERT_EQ(static_cast<int64_t>(s->histogram[c].size()), kIntensityBins);
    for (int64_t b = 0; b < kIntensityBins; ++b) {
      EXPECT_EQ(s->histogram[c][b], direct[b].item<int64_t>()) << "channel " << c << " bin " << b;
    }
  }
  // Min-max preparation puts each image's extremes at 0 and 1: both end
  // bins hold at least one pixel an image.
  EXPECT_GE(s->histogram[0].front(), 20);
  EXPECT_GE(s->histogram[0].back(), 20);
}

// Its threads leave the process's intra-op count as the edge set it (they
// set it to 1 for the whole process, before the trainer's first step).
TEST(ChannelStats, ItsThreadsLeaveTheProcessThreadCountAlone) {
  scdino::testing::ScratchDir dir;
  auto d = WriteSet(dir.path(), 6);
  const int was = at::get_num_threads();
  at::set_num_threads(3);
  StatsOptions o;
  o.fraction = 1.0;
  o.threads = 2;
  const bool ok = ComputeChannelStats(d, ImagePrep{}, o).ok();
  int later = 0;
  std::thread([&] { later = at::get_num_threads(); }).join();
  at::set_num_threads(was);
  EXPECT_TRUE(ok);
  EXPECT_EQ(later, 3);
}

// The histograms survive the file; a file of an older version has none and
// is still read; a histogram of the wrong shape is refused by name.
TEST(ChannelStats, HistogramsRoundTripAndOldFilesStillRead) {
  scdino::testing::ScratchDir dir;
  auto d = WriteSet(dir.file("set"), 6);
  ImagePrep prep;
  prep.channels = {0, 2};
  StatsOptions o;
  o.fraction = 1.0;
  auto s = ComputeChannelStats(d, prep, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string path = dir.file("channel_stats.json");
  ASSERT_TRUE(WriteStats(path, *s).ok());
  auto back = ReadStats(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->histogram, s->histogram);

  ASSERT_TRUE(WriteFileAtomic(dir.file("old.json"), R"({"channels": [0], "mean": [0.2], "std": [0.1]})").ok());
  auto old = ReadStats(dir.file("old.json"));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->histogram.empty());

  ASSERT_TRUE(WriteFileAtomic(dir.file("bad.json"),
                              R"({"channels": [0], "mean": [0.2], "std": [0.1], "histogram": {"counts": [[1, 2]]}})").ok());
  auto bad = ReadStats(dir.file("bad.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir.file("bad.json") + ": histogram.counts must hold 32 counts for each of "
                                        "the 1 channels"),
            std::string::npos)
      << bad.status().message();
}

// An empty file list (a data source with no files) is an error naming the
// data set, not a read past the end of the list.
TEST(ChannelStats, ADataSetWithoutImagesIsAnError) {
  Dataset d;
  d.root = "/data/empty";
  ImagePrep prep;
  prep.channels = {0};
  auto s = ComputeChannelStats(d, prep, StatsOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("/data/empty: expected at least one image"), std::string::npos)
      << s.status().message();
}

TEST(ChannelStats, SeededFractionAndThreadIndependence) {
  scdino::testing::ScratchDir dir;
  auto d = WriteSet(dir.path(), 30);
  StatsOptions o;
  o.fraction = 0.2;
  o.seed = 5;
  o.threads = 1;
  auto one = ComputeChannelStats(d, {}, o);
  o.threads = 4;
  auto four = ComputeChannelStats(d, {}, o);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(one->images, 6);
  for (size_t c = 0; c < one->mean.size(); ++c) EXPECT_NEAR(one->mean[c], four->mean[c], 1e-12);
  o.seed = 6;
  auto other = ComputeChannelStats(d, {}, o);
  EXPECT_NE(other->mean[0], one->mean[0]);
  // Written and read back.
  ASSERT_TRUE(WriteStats(dir.file("s.json"), *one).ok());
  auto back = ReadStats(dir.file("s.json"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->mean, one->mean);
  o.fraction = 0;
  EXPECT_FALSE(ComputeChannelStats(d, {}, o).ok());
}

// A stop (signal, control API) ends the computation at the next image, on
// every thread.
TEST(ChannelStats, AStopEndsItAtTheNextImage) {
  scdino::testing::ScratchDir dir;
  auto d = WriteSet(dir.path(), 40);
  StatsOptions o;
  o.fraction = 1.0;
  o.threads = 2;
  std::atomic<int> asked{0};
  o.should_stop = [&] { return ++asked > 5; };
  auto s = ComputeChannelStats(d, {}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kAborted);
  EXPECT_NE(s.status().message().find("channel statistics"), std::string::npos) << s.status().message();
  EXPECT_LT(asked.load(), 12) << "the threads went on after the stop";
}

}  // namespace
}  // namespace scdino::data
