#include "trainer/learning_check.h"

#include <gtest/gtest.h>

#include "data/synthetic.h"
#include "features/backbone.h"
#include "config/config.h"
#include "plan/source.h"
#include "support/cell_folders.h"
#include "support/test_support.h"

namespace scdino::trainer {
namespace {

// Two class folders of 8-bit 3-channel TIFF cells.
void WriteCells(const std::string& root, int64_t per_class) {
  data::SyntheticOptions o;
  o.classes = 2;
  o.per_class = per_class;
  o.channels = 3;
  o.size = 20;
  scdino::testing::WriteCellFolders(root, o, "k");
}

run::RunConfig Config(const std::string& dir, int64_t crop, int64_t mb) {
  const std::string yaml = R"(
meta: {name_of_run: lc, output_dir: ")" + dir + R"(/runs", dataset_dir: ")" + dir + R"(/cells", seed: 3,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 1
  batch_size_per_gpu: 4
  hyperparameters: {arch: vit_tiny, embed_dim: 32, depth: 1, num_heads: 2, patch_size: 8,
                    global_crops_size: )" + std::to_string(crop) + R"(, local_crops_size: 8, local_crops_number: 2,
                    out_dim: 64, head_hidden_dim: 32, head_bottleneck_dim: 16, warmup_epochs: 0}
scdino: {threads: 1, learning_check_mb: )" + std::to_string(mb) + R"(}
)";
  auto c = run::ParseRunConfig(yaml, "lc.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return std::move(c).value();
}

// Up to 3,000 images at 224 x 224 x 5 would be 3 GB on rank 0: the images
// are as many as scdino.learning_check_mb holds, read beside the training.
TEST(LearningCheck, ItsImagesStayWithinTheirByteBoundAndLoadBesideTheTraining) {
  scdino::testing::ScratchDir dir;
  WriteCells(dir.path() + "/cells", 30);
  // 3 x 96 x 96 float32 is 108 KiB: 1 MiB holds 9, a third held out.
  const auto config = Config(dir.path(), 96, 1);
  std::string why_not;
  auto check = LearningCheck::Make(config, *run::IndexDataset(config), torch::kCPU, &why_not);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  ASSERT_TRUE(*check) << why_not;
  ASSERT_TRUE((*check)->WaitLoaded(std::chrono::seconds(60)));
  EXPECT_EQ((*check)->test_images(), 3);
  EXPECT_EQ((*check)->train_images(), 6);
  auto random = features::RandomBackbone(config.dino_options().vit, 3, torch::kCPU);
  const auto report = (*check)->Measure(random.vit, 1, 10);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->test_images, 3);
  EXPECT_EQ(report->train_images, 6);
  EXPECT_GE(report->trained_top1, 0.0);
  EXPECT_LE(report->trained_top1, 1.0);
  // Both baselines are measured: the same random ViT as the teacher ties
  // with itself, which is not learning.
  EXPECT_DOUBLE_EQ(report->random_top1, report->trained_top1);
  EXPECT_GE(report->pixels_top1, 0.0);
  EXPECT_LE(report->pixels_top1, 1.0);
  EXPECT_NE(report->verdict().learned, Learned::kYes) << report->verdict().line;

  // At 128 px 1 MiB holds 5: no check, saying why with the key.
  why_not.clear();
  auto none = LearningCheck::Make(Config(dir.path(), 128, 1), *run::IndexDataset(config), torch::kCPU, &why_not);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(*none);
  EXPECT_NE(why_not.find("scdino.learning_check_mb (1 MiB) holds 5 images of 192 KiB (3 x 128 x 128 float32)"),
            std::string::npos) << why_not;
}

// Images of mixed sizes meet the baselines at one size: prepared as the
// features are (resized to the crop size), the raw pixels are comparable
// rows, and the log says how they were prepared.
TEST(LearningCheck, MixedImageSizesAreResizedForTheRawPixels) {
  scdino::testing::ScratchDir dir;
  data::SyntheticOptions o;
  o.classes = 2;
  o.per_class = 12;
  o.channels = 3;
  o.size = 20;
  scdino::testing::WriteCellFolders(dir.path() + "/cells", o, "k");
  o.size = 28;  // the same classes, larger
  scdino::testing::WriteCellFolders(dir.path() + "/cells", o, "k", /*first=*/12);
  const auto config = Config(dir.path(), 16, 64);
  std::string why_not;
  auto check = LearningCheck::Make(config, *run::IndexDataset(config), torch::kCPU, &why_not);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  ASSERT_TRUE(*check) << why_not;
  auto random = features::RandomBackbone(config.dino_options().vit, 3, torch::kCPU);
  const auto report = (*check)->Measure(random.vit, 1, 10);
  ASSERT_TRUE(report.has_value()) << "a mixed-size set must be checked, not skipped";
  EXPECT_EQ(report->test_images + report->train_images, 48);
  EXPECT_GE(report->pixels_top1, 0.0);
  EXPECT_LE(report->pixels_top1, 1.0);
}

}  // namespace
}  // namespace scdino::trainer
