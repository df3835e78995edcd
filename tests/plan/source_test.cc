// What a run reads before it starts: channel statistics reused only for the
// data set and channels they were computed for, a channel selection the
// images cannot satisfy refused up front, and whether the images share an
// orientation (the recipe's flips).
#include "plan/source.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "data/image_io.h"
#include "data/packed.h"
#include "data/synthetic.h"
#include "support/cell_folders.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

using scdino::testing::ScratchDir;

// n images of 4 channels per class in class folders under dir/cells.
void WriteCells(const std::string& dir, int64_t n, int64_t first = 0) {
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = n;
  so.channels = 4;
  so.size = 16;
  scdino::testing::WriteCellFolders(dir + "/cells", so, "type_", first);
}

RunConfig Config(const std::string& dir, const std::string& extra = "", const std::string& channels = "021") {
  auto c = ParseRunConfig("meta: {name_of_run: r, output_dir: \"" + dir + "\", dataset_dir: \"" + dir +
                              "/cells\", selected_channel_combination_per_run: [\"" + channels + "\"]}\n"
                              "train_scDINO: {num_workers: 1}\n" + extra,
                          "cfg.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return *c;
}

// 3 classes of glyphs (an L, a T on its side, a step) of 24 px, shifted by
// up to 2 px, with noise: all upright, or each flipped at random.
void WriteGlyphs(const std::string& root, int64_t per_class, bool random_flips) {
  torch::manual_seed(5);
  for (int64_t k = 0; k < 3; ++k) {
    const std::string d = root + "/glyph" + std::to_string(k);
    std::filesystem::create_directories(d);
    for (int64_t i = 0; i < per_class; ++i) {
      auto g = torch::zeros({24, 24});
      const int64_t dy = torch::randint(-2, 3, {1}).item<int64_t>(), dx = torch::randint(-2, 3, {1}).item<int64_t>();
      auto bar = [&](int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
        g.slice(0, y0 + dy, y1 + dy).slice(1, x0 + dx, x1 + dx).fill_(1.0);
      };
      bar(4, 20, 4, 8);  // every glyph's upright stroke on the left
      if (k == 0) bar(16, 20, 4, 18);
      if (k == 1) bar(10, 14, 4, 18);
      if (k == 2) bar(4, 8, 4, 12), bar(4, 12, 12, 16);
      g = (g + 0.1 * torch::rand({24, 24})).clamp(0, 1);
      if (random_flips && torch::rand({1}).item<double>() < 0.5) g = g.flip({1});
      if (random_flips && torch::rand({1}).item<double>() < 0.5) g = g.flip({0});
      auto hwc = (g.unsqueeze(2) * 255).round().to(torch::kUInt8);
      ASSERT_TRUE(data::WriteTiff(d + "/" + std::to_string(i) + ".tif", hwc).ok());
    }
  }
}

TEST(Orientation, FlippedImagesOfAnOrientedSetAreFarFromTheRest) {
  ScratchDir dir;
  WriteGlyphs(dir.file("upright"), 40, false);
  WriteGlyphs(dir.file("any_way"), 40, true);
  // Cells of the README's kind: every which way, shifted by up to 18% of the
  // side. (Crisp cells of 16 px shifted by less measure as oriented, and
  // are: their centres lie half a pixel right of and below the middle.)
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = 60;
  so.channels = 3;
  so.size = 32;
  so.difficulty = 0.6;
  scdino::testing::WriteCellFolders(dir.file("cells"), so, "type_");
  auto measure = [&](const std::string& data, const std::string& channels) {
    auto c = Config(dir.path(), "", channels);
    c.meta.dataset_dir = dir.file(data);
    auto d = IndexDataset(c);
    EXPECT_TRUE(d.ok());
    auto shape = MeasureData(c, *d, data::ProbeFirstImage(*d, c.image_prep()), 1);
    EXPECT_TRUE(shape.ok());
    EXPECT_TRUE(MeasureFlips(c, *d, &*shape).ok());
    return *shape;
  };
  const DataShape upright = measure("upright", "0"), any_way = measure("any_way", "0"), cells = measure("cells", "021");
  EXPECT_EQ(upright.flip_sample, 120);
  EXPECT_GE(upright.hflip_distance, kOrientedFlipDistance);
  EXPECT_GE(upright.vflip_distance, kOrientedFlipDistance);
  for (const auto& s : {any_way, cells}) {
    EXPECT_GT(s.hflip_distance, 0.0);
    EXPECT_LT(s.hflip_distance, kOrientedFlipDistance);
    EXPECT_LT(s.vflip_distance, kOrientedFlipDistance);
  }
  // Too few images to tell: not measured, the flips stay as configured.
  WriteGlyphs(dir.file("few"), 10, false);
  auto c = Config(dir.path(), "", "0");
  c.meta.dataset_dir = dir.file("few");
  auto d = IndexDataset(c);
  auto shape = MeasureData(c, *d, data::ProbeFirstImage(*d, c.image_prep()), 1);
  ASSERT_TRUE(MeasureFlips(c, *d, &*shape).ok());
  EXPECT_EQ(shape->hflip_distance, 0.0);
  // A stop request ends the measure.
  c = Config(dir.path(), "", "0");
  c.meta.dataset_dir = dir.file("upright");
  d = IndexDataset(c);
  shape = MeasureData(c, *d, data::ProbeFirstImage(*d, c.image_prep()), 1);
  EXPECT_EQ(MeasureFlips(c, *d, &*shape, [] { return true; }).code(), StatusCode::kAborted);
}

TEST(Statistics, ReusedOnlyForTheDataSetTheyWereComputedFor) {
  ScratchDir dir;
  WriteCells(dir.path(), 4);
  auto single = Coordinator::Single();
  const RunConfig c = Config(dir.path());
  auto d = IndexDataset(c);
  ASSERT_TRUE(d.ok());
  auto first = LoadOrComputeStats(c, *d, c.image_prep(), *single);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->dataset_fingerprint, DatasetFingerprint(*d, c.image_prep()));
  // Unchanged: read back, not recomputed (the file is left as it was).
  const std::string path = c.stats_path();
  ASSERT_TRUE(WriteFileAtomic(path, data::StatsToJson([&] {
                                auto s = *first;
                                s.images = 12345;  // a marker only a reread shows
                                return s;
                              }()))
                  .ok());
  auto again = LoadOrComputeStats(c, *d, c.image_prep(), *single);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->images, 12345);
  // More images: the data set changed, the run directory's file is recomputed.
  WriteCells(dir.path(), 2, /*first=*/4);
  auto grown = IndexDataset(c);
  ASSERT_TRUE(grown.ok());
  auto recomputed = LoadOrComputeStats(c, *grown, c.image_prep(), *single);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status().ToString();
  EXPECT_NE(recomputed->images, 12345);
  EXPECT_NE(recomputed->dataset_fingerprint, first->dataset_fingerprint);
  // Other channels: a different fingerprint as well.
  data::ImagePrep other = c.image_prep();
  other.channels = {0, 1};
  EXPECT_NE(DatasetFingerprint(*grown, other), recomputed->dataset_fingerprint);
}

// A file's channel combinations share one statistics file beside their
// folders (scDINO computes them once): over every channel they use, each
// run given its own channels, the same numbers as its channels alone.
TEST(Statistics, SeveralCombinationsShareOneFileOverEveryChannelTheyUse) {
  ScratchDir dir;
  WriteCells(dir.path(), 4);
  auto single = Coordinator::Single();
  RunConfig first = Config(dir.path(), "", "31\", \"2");
  RunConfig second = first;
  second.scdino.channel_combination = 1;
  ASSERT_EQ(first.stats_path(), dir.path() + "/r/channel_stats.json");
  ASSERT_EQ(second.stats_path(), first.stats_path());
  auto d = IndexDataset(first);
  ASSERT_TRUE(d.ok());
  auto a = LoadOrComputeStats(first, *d, first.image_prep(), *single);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->channels, (std::vector<int64_t>{3, 1}));
  ASSERT_EQ(a->mean.size(), 2u);
  ASSERT_EQ(a->histogram.size(), 2u);
  auto file = data::ReadStats(first.stats_path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->channels, (std::vector<int64_t>{1, 2, 3}));
  const auto before = ReadFile(first.stats_path());
  auto b = LoadOrComputeStats(second, *d, second.image_prep(), *single);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->channels, (std::vector<int64_t>{2}));
  EXPECT_EQ(*ReadFile(first.stats_path()), *before) << "the second combination recomputed the shared file";
  // Channel 2's numbers are those of a run of channel 2 alone.
  RunConfig alone = Config(dir.path(), "scdino: {stats_file: \"" + dir.file("alone.json") + "\"}\n", "2");
  auto own = LoadOrComputeStats(alone, *d, alone.image_prep(), *single);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_NEAR(b->mean[0], own->mean[0], 1e-9);
  EXPECT_NEAR(b->std[0], own->std[0], 1e-9);
  EXPECT_EQ(b->histogram[0], own->histogram[0]);
  EXPECT_EQ(b->images, own->images);
  // A file the user names (scdino.stats_file) serves them all the same way:
  // the second combination is not refused as "for other channels".
  RunConfig named = Config(dir.path(), "scdino: {stats_file: \"" + dir.file("mine.json") + "\"}\n", "31\", \"2");
  RunConfig named_second = named;
  named_second.scdino.channel_combination = 1;
  ASSERT_TRUE(LoadOrComputeStats(named, *d, named.image_prep(), *single).ok());
  auto theirs = LoadOrComputeStats(named_second, *d, named_second.image_prep(), *single);
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  EXPECT_EQ(theirs->channels, (std::vector<int64_t>{2}));
}

// scdino-stats recomputes the shared file only under its lock: while
// another combination's run holds it, the file stays as it is and the
// recomputation waits; then it replaces what the file held.
TEST(Statistics, RecomputingTheSharedFileWaitsForItsLockAndReplacesIt) {
  ScratchDir dir;
  WriteCells(dir.path(), 4);
  auto single = Coordinator::Single();
  RunConfig c = Config(dir.path(), "", "31\", \"2");
  auto d = IndexDataset(c);
  ASSERT_TRUE(d.ok());
  auto first = LoadOrComputeStats(c, *d, c.image_prep(), *single);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // A file that the plain load accepts (same data set and channels) but
  // whose first mean is not what the images give.
  auto j = nlohmann::json::parse(*ReadFile(c.stats_path()));
  j["mean"][0] = 123.0;
  ASSERT_TRUE(WriteFileAtomic(c.stats_path(), j.dump()).ok());
  const std::string planted = *ReadFile(c.stats_path());
  auto reused = LoadOrComputeStats(c, *d, c.image_prep(), *single);
  ASSERT_TRUE(reused.ok());
  ASSERT_EQ(reused->mean[1], 123.0) << "the plain load should take the file as it is (channel 1 of 3, 1)";

  const int fd = ::open((c.stats_path() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto recomputed = std::async(std::launch::async, [&] { return RecomputeStats(c, *d, c.image_prep(), *single); });
  EXPECT_EQ(recomputed.wait_for(std::chrono::milliseconds(800)), std::future_status::timeout)
      << "recomputed while another run held the lock";
  EXPECT_EQ(*ReadFile(c.stats_path()), planted) << "the file changed while another run held its lock";
  ::close(fd);  // the other run ends
  auto r = recomputed.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->channels, (std::vector<int64_t>{3, 1}));
  EXPECT_NEAR(r->mean[1], first->mean[1], 1e-12);
  auto file = data::ReadStats(c.stats_path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->channels, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_NE(file->mean[0], 123.0);
}

TEST(Statistics, AFileTheUserNamedIsRefusedForAnotherDataSet) {
  ScratchDir dir;
  WriteCells(dir.path(), 3);
  auto single = Coordinator::Single();
  const RunConfig c = Config(dir.path(), "scdino: {stats_file: \"" + dir.file("shared_stats.json") + "\"}\n");
  auto d = IndexDataset(c);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(LoadOrComputeStats(c, *d, c.image_prep(), *single).ok());
  WriteCells(dir.path(), 1, /*first=*/3);
  auto grown = IndexDataset(c);
  auto r = LoadOrComputeStats(c, *grown, c.image_prep(), *single);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("shared_stats.json (scdino.stats_file)"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("another data set"), std::string::npos) << r.status().message();
  // A file of an older version (no fingerprint) is not trusted either.
  auto old = data::ReadStats(dir.file("shared_stats.json"));
  old->dataset_fingerprint.clear();
  ASSERT_TRUE(data::WriteStats(dir.file("shared_stats.json"), *old).ok());
  auto legacy = LoadOrComputeStats(c, *d, c.image_prep(), *single);
  ASSERT_FALSE(legacy.ok());
  EXPECT_NE(legacy.status().message().find("older scdino"), std::string::npos) << legacy.status().message();
}

TEST(Channels, ASelectionTheImagesCannotSatisfyIsRefusedUpFront) {
  ScratchDir dir;
  WriteCells(dir.path(), 2);
  auto single = Coordinator::Single();
  const RunConfig c = Config(dir.path(), "", "027");
  auto d = IndexDataset(c);
  ASSERT_TRUE(d.ok());
  auto s = CheckChannels(*d, c.image_prep());
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 4 channel(s)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(".tif"), std::string::npos) << s.message();
  auto src = MakeSource(c, *d, *single, torch::kCPU);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckChannels(*d, Config(dir.path()).image_prep()).ok());
}

TEST(Channels, EveryCombinationIsCheckedAgainstTheImagesBeforeAnythingQueues) {
  ScratchDir dir;
  WriteCells(dir.path(), 20);
  // Two combinations, the second naming channel 5 of images with 4.
  const RunConfig c = Config(dir.path(), "", "01\", \"5");
  auto first = FirstImageOf(c);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_FALSE(first->entries.empty());
  EXPECT_LE(first->entries.size(), 16u) << "the walk stops early: a large tree is not indexed whole";
  const data::FirstImage probe = data::ProbeFirstImage(*first, c.image_prep());
  auto s = CheckCombinations(c, probe, /*only_trained=*/false);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (const char* part : {"cfg.yaml", "meta.selected_channel_combination_per_run[1] (\"5\") selects channel 5",
                           "the images have 4 channel(s)", ".tif", "channels 0 to 3"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in " << s.message();
  }
  // A run training the first one is not stopped by the other's mistake.
  EXPECT_TRUE(CheckCombinations(c, probe, /*only_trained=*/true).ok());
  EXPECT_TRUE(CheckCombinations(Config(dir.path(), "", "01\", \"3"), probe, false).ok());
  // Data that is not here (a login node without the data's file system).
  RunConfig elsewhere = c;
  elsewhere.meta.dataset_dir = dir.file("nowhere");
  auto missing = FirstImageOf(elsewhere);
  ASSERT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nowhere (meta.dataset_dir)"), std::string::npos);
}

TEST(PackedDataset, ItsStatisticsAreTheFoldersAndItsLabelDepthAndStagedCopyAreChecked) {
  ScratchDir dir;
  WriteCells(dir.path(), 3);
  const RunConfig folders = Config(dir.path());
  auto d = IndexDataset(folders);
  ASSERT_TRUE(d.ok());
  data::PackOptions po;
  po.out = dir.path() + "/packed";
  po.block_samples = 2;
  ASSERT_TRUE(data::PackDataset(*d, po).ok());
  RunConfig packed = folders;
  packed.meta.dataset_dir = po.out;
  auto no_env = [](const char*) -> const char* { return nullptr; };
  auto set = data::OpenPackedSet(DataSourceOf(packed, no_env));
  ASSERT_TRUE(set.ok() && *set) << set.status().ToString();
  auto pd = IndexDataset(packed);
  ASSERT_TRUE(pd.ok());
  EXPECT_EQ(pd->entries.size(), d->entries.size());
  // The statistics' fingerprint is of relative paths: the folders' file serves.
  EXPECT_EQ(DatasetFingerprint(*pd, packed.image_prep()), DatasetFingerprint(*d, folders.image_prep()));
  // A folder is not a packed set.
  auto none = data::OpenPackedSet(DataSourceOf(folders, no_env));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  // Labels at another depth than it was packed with: refused, naming both.
  RunConfig deeper = packed;
  deeper.meta.folder_depth_for_labels = 1;
  auto refused = data::OpenPackedSet(DataSourceOf(deeper, no_env));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("folder_depth_for_labels 0, the config says 1"), std::string::npos)
      << refused.status().message();
  // SCDINO_STAGE_DIR: the verified copy there, else the shared one.
  const std::string stage = dir.path() + "/local";
  auto env = [&](const char* name) -> const char* { return std::string(name) == "SCDINO_STAGE_DIR" ? stage.c_str() : nullptr; };
  auto shared = data::OpenPackedSet(DataSourceOf(packed, env));
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ((*shared)->dataset().root, po.out);
  ASSERT_TRUE(data::StagePackedSet(**set, stage).ok());
  auto local = data::OpenPackedSet(DataSourceOf(packed, env));
  ASSERT_TRUE(local.ok());
  // Read from the node's copy under the shared set's paths; LoadImage too.
  EXPECT_EQ((*local)->files_dir(), stage + "/" + (*set)->content_fingerprint());
  EXPECT_EQ((*local)->dataset().root, po.out);
  EXPECT_EQ(*data::PackedSetOf(po.out + "/x/y.tif"), *local);
}

}  // namespace
}  // namespace scdino::run
