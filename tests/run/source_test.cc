// What a run reads before it starts: channel statistics reused only for the
// data set and channels they were computed for, and a channel selection the
// images cannot satisfy refused up front.
#include "run/source.h"

#include <gtest/gtest.h>

#include <filesystem>

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
  auto set = OpenPackedDataset(packed, no_env);
  ASSERT_TRUE(set.ok() && *set) << set.status().ToString();
  auto pd = IndexDataset(packed);
  ASSERT_TRUE(pd.ok());
  EXPECT_EQ(pd->entries.size(), d->entries.size());
  // The statistics' fingerprint is of relative paths: the folders' file serves.
  EXPECT_EQ(DatasetFingerprint(*pd, packed.image_prep()), DatasetFingerprint(*d, folders.image_prep()));
  // A folder is not a packed set.
  auto none = OpenPackedDataset(folders, no_env);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  // Labels at another depth than it was packed with: refused, naming both.
  RunConfig deeper = packed;
  deeper.meta.folder_depth_for_labels = 1;
  auto refused = OpenPackedDataset(deeper, no_env);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("folder_depth_for_labels 0, the config says 1"), std::string::npos)
      << refused.status().message();
  // SCDINO_STAGE_DIR: the verified copy there, else the shared one.
  const std::string stage = dir.path() + "/local";
  auto env = [&](const char* name) -> const char* { return std::string(name) == "SCDINO_STAGE_DIR" ? stage.c_str() : nullptr; };
  auto shared = OpenPackedDataset(packed, env);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ((*shared)->dataset().root, po.out);
  ASSERT_TRUE(data::StagePackedSet(**set, stage).ok());
  auto local = OpenPackedDataset(packed, env);
  ASSERT_TRUE(local.ok());
  // Read from the node's copy under the shared set's paths; LoadImage too.
  EXPECT_EQ((*local)->files_dir(), stage + "/" + (*set)->content_fingerprint());
  EXPECT_EQ((*local)->dataset().root, po.out);
  EXPECT_EQ(*data::PackedSetOf(po.out + "/x/y.tif"), *local);
}

}  // namespace
}  // namespace scdino::run
