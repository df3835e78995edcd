// The trainer's data is indexed once per process and read by index: a walk
// of a large folder tree is minutes on a parallel file system, and a
// packed image found by its path costs several metadata operations against
// one pread. Before, a rank indexed a folder set twice and rank 0 three
// times; the statistics, the recipe's measure and the learning check found
// every packed image by its path.
#include "trainer/training_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "common/files.h"
#include "data/dataset.h"
#include "data/packed.h"
#include "data/synthetic.h"
#include "config/config.h"
#include "support/cell_folders.h"
#include "support/test_support.h"

namespace scdino::trainer {
namespace {

run::RunConfig Config(const std::string& dir, const std::string& data) {
  const std::string yaml = R"(
meta: {name_of_run: td, output_dir: ")" + dir + R"(/runs", dataset_dir: ")" + data + R"(", seed: 3,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 1
  num_workers: 1
  batch_size_per_gpu: 4
  hyperparameters: {arch: vit_tiny, embed_dim: 32, depth: 1, num_heads: 2, patch_size: 8,
                    global_crops_size: 16, local_crops_size: 8, local_crops_number: 2,
                    out_dim: 64, head_hidden_dim: 32, head_bottleneck_dim: 16, warmup_epochs: 0}
scdino: {threads: 1}
)";
  auto c = run::ParseRunConfig(yaml, "td.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return std::move(c).value();
}

// Two classes of 20 three-channel 20 px cells under dir/cells.
void WriteCells(const std::string& dir) {
  data::SyntheticOptions o;
  o.classes = 2;
  o.per_class = 20;
  o.channels = 3;
  o.size = 20;
  scdino::testing::WriteCellFolders(dir + "/cells", o, "k");
}

// What rank 0 of a run does before its first step, and one batch read.
TrainingData Prepare(const run::RunConfig& config) {
  auto single = run::Coordinator::Single();
  auto data = PrepareTrainingData(config, *single, torch::kCPU, /*resuming=*/false, {}, nullptr);
  if (!data.ok()) throw std::runtime_error(data.status().ToString());
  EXPECT_EQ(data->source->dataset_size(), 40);
  data->source->StartEpoch(0, {});
  EXPECT_TRUE(data->source->Next().has_value());
  EXPECT_TRUE(data->check) << data->no_check;
  if (data->check) {
    EXPECT_TRUE(data->check->WaitLoaded(std::chrono::seconds(60)));
    EXPECT_GT(data->check->test_images(), 0);
  }
  return std::move(data).value();
}

TEST(TrainingData, AFolderDataSetIsIndexedOnceForTheRecipeTheSourceAndTheCheck) {
  scdino::testing::ScratchDir dir;
  WriteCells(dir.path());
  auto config = Config(dir.path(), dir.path() + "/cells");
  const int64_t before = data::IndexPasses();
  auto data = Prepare(config);
  EXPECT_EQ(data::IndexPasses() - before, 1);
  // Rank 0's crop preview (data/crop_preview.h) of the first image, with the
  // settled recipe's crops: its PNG header holds the picture's size.
  auto png = ReadFile(config.run_dir() + "/crops_preview.png");
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  ASSERT_GT(png->size(), 24u);
  EXPECT_EQ(png->substr(1, 3), "PNG");
  const auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>((*png)[at + i]);
    return static_cast<int64_t>(v);
  };
  const auto crops = data.plan.settings.multicrop_options();
  const int64_t width = 4 + 3 * (crops.global_size + 4) + crops.local_crops_number * (crops.local_size + 4);
  const int64_t zoom = std::max<int64_t>(1, 640 / width);
  EXPECT_EQ(be32(16), zoom * width);
  EXPECT_EQ(be32(20), zoom * (4 + 3 * (crops.global_size + 4))) << "3 channels, one row each";
}

TEST(TrainingData, APackedSetIsReadByIndexNeverFoundByItsPaths) {
  scdino::testing::ScratchDir dir;
  WriteCells(dir.path());
  auto folders = data::IndexFolder(dir.path() + "/cells");
  ASSERT_TRUE(folders.ok());
  data::PackOptions po;
  po.out = dir.path() + "/packed";
  po.block_samples = 4;
  ASSERT_TRUE(data::PackDataset(*folders, po).ok());
  auto config = Config(dir.path(), po.out);
  const int64_t before = data::IndexPasses(), lookups = data::PackedPathLookups();
  auto data = Prepare(config);
  EXPECT_EQ(data::IndexPasses() - before, 1) << "pack.json and index.csv read once";
  EXPECT_EQ(data::PackedPathLookups() - lookups, 0)
      << "the statistics, the recipe's measure, the source and the check read the set's images by index";
}

// A flat folder of unlabelled images trains: one class named after the
// folder, the log says evaluation needs labels, and the learning check
// says why it does not run.
TEST(TrainingData, AFlatFolderOfUnlabelledImagesTrains) {
  scdino::testing::ScratchDir dir;
  WriteCells(dir.path());
  std::filesystem::create_directories(dir.path() + "/flat");
  for (const auto& cls : {"k0", "k1"}) {
    for (const auto& f : std::filesystem::directory_iterator(dir.path() + "/cells/" + cls)) {
      std::filesystem::rename(f.path(), dir.path() + "/flat/" + cls + f.path().filename().string());
    }
  }
  auto config = Config(dir.path(), dir.path() + "/flat");
  auto single = run::Coordinator::Single();
  std::ostringstream log;
  auto data = PrepareTrainingData(config, *single, torch::kCPU, /*resuming=*/false, {}, &log);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->source->dataset_size(), 40);
  EXPECT_EQ(data->source->class_names(), (std::vector<std::string>{"flat"}));
  data->source->StartEpoch(0, {});
  EXPECT_TRUE(data->source->Next().has_value());
  EXPECT_FALSE(data->check);
  EXPECT_EQ(data->no_check, "the data set has one class (no labels to check against)");
  EXPECT_NE(log.str().find("/flat: one class ('flat', 40 images): training needs no labels; the evaluation's kNN"),
            std::string::npos)
      << log.str();
}

}  // namespace
}  // namespace scdino::trainer
