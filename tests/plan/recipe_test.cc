// scdino.recipe: auto: the rules that derive the recipe from the data, the
// file's keys winning over them, the recipe file every service reads, the
// safer settings of a recovery, and the bad inputs each refused naming the
// numbers: fewer images than a global batch, images smaller than the patch
// or the crops, a recipe key of the wrong type.
#include "plan/recipe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include "common/files.h"
#include "data/image_io.h"
#include "data/synthetic.h"
#include "plan/plan.h"
#include "plan/source.h"
#include "support/cell_folders.h"
#include "support/ranks.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

using scdino::testing::ExpectInvalid;
using scdino::testing::Ranks;
using scdino::testing::ScratchDir;

// The config a With* call made (the test fails on an error).
RunConfig Applied(const StatusOr<RunConfig>& c) {
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : RunConfig();
}

// A config with recipe: auto; `train` and `scdino` are the sections' other keys.
RunConfig RecipeConfig(const std::string& train = "", const std::string& scdino = "") {
  auto c = ParseRunConfig("meta: {name_of_run: r, output_dir: /tmp/none, dataset_dir: /tmp/none}\n"
                          "train_scDINO: {batch_size_per_gpu: 32" + train + "}\n"
                          "scdino: {recipe: auto" + scdino + "}\n",
                          "cfg.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return *c;
}

DataShape Shape(int64_t images, int64_t side, int64_t batch = 32) {
  DataShape d;
  d.origin = "/data/cells";
  d.first_image = "/data/cells/a/0.tif";
  d.images = images;
  d.height = d.width = side;
  d.channels = 3;
  d.global_batch = batch;
  return d;
}

std::map<std::string, std::string> Values(const std::vector<RecipeValue>& r) {
  std::map<std::string, std::string> m;
  for (const auto& v : r) m[v.key] = v.value;
  return m;
}

const std::string H = "train_scDINO.hyperparameters.";

TEST(Recipe, SmallCellImagesGetTheSmallDataRecipe) {
  // The README's data set: the small-data recipe's shape comes out.
  auto r = DeriveRecipe(Shape(512, 50), RecipeConfig());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v = Values(*r);
  EXPECT_EQ(v[H + "patch_size"], "8");
  EXPECT_EQ(v[H + "global_crops_size"], "48");
  EXPECT_EQ(v[H + "local_crops_size"], "24");
  EXPECT_EQ(v[H + "out_dim"], "256");
  EXPECT_EQ(v["scdino.teacher_centering"], "sinkhorn_knopp");
  EXPECT_EQ(v[H + "teacher_temp"], "0.01");
  // 16 steps an epoch, 2 x 512^0.75 = 215 -> at least 256 steps: 16 epochs.
  EXPECT_EQ(v["train_scDINO.epochs"], "16");
  EXPECT_EQ(v[H + "lr"], "0.015");
  EXPECT_EQ(v["downstream_analyses.compute_cls_features.resize_length"], "48");
}

TEST(Recipe, FlipsOnlyWhereTheImagesLieEveryWhichWay) {
  // Not measured (the synthetic source, a few images): the flips stay as configured.
  auto unmeasured = Values(*DeriveRecipe(Shape(512, 50), RecipeConfig()));
  EXPECT_EQ(unmeasured.count("scdino.augmentation.hflip_p"), 0u);
  DataShape digits = Shape(5000, 20);
  digits.hflip_distance = 1.44;
  digits.vflip_distance = 1.05;
  digits.flip_sample = 1280;
  auto r = DeriveRecipe(digits, RecipeConfig());
  ASSERT_TRUE(r.ok());
  auto v = Values(*r);
  EXPECT_EQ(v["scdino.augmentation.hflip_p"], "0");
  EXPECT_EQ(v["scdino.augmentation.vflip_p"], "0.5");
  // Oriented images are framed alike: crops keep more of the frame.
  EXPECT_EQ(v[H + "global_crops_scale"], "[0.6, 1.0]");
  EXPECT_EQ(v[H + "local_crops_scale"], "[0.3, 0.6]");
  EXPECT_EQ(v["scdino.augmentation.solarize_p"], "0");
  DataShape cells = digits;
  cells.hflip_distance = 1.02;
  auto w = Values(*DeriveRecipe(cells, RecipeConfig()));
  EXPECT_EQ(w["scdino.augmentation.hflip_p"], "0.5");
  EXPECT_EQ(w[H + "global_crops_scale"], "[0.4, 1.0]");
  EXPECT_EQ(w[H + "local_crops_scale"], "[0.15, 0.4]");
  EXPECT_EQ(w.count("scdino.augmentation.solarize_p"), 0u);
  const auto lines = DescribeRecipe(*r);
  auto said = [&](const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(said("scdino.augmentation.hflip_p: 0 (flipped left-right, an image is 1.44 x as far from its nearest "
                   "image of the set as unflipped (median; measured on 1280 images; from 1.10: the images share an orientation"));
  EXPECT_TRUE(said("scdino.augmentation.vflip_p: 0.5 (flipped up-down, an image is 1.05 x as far"));
  // The file's value wins.
  RunConfig c = RecipeConfig("", ", augmentation: {hflip_p: 0.5}");
  c = Applied(WithRecipe(c, *DeriveRecipe(digits, c)));
  EXPECT_EQ(c.scdino.augmentation.hflip_p, 0.5);
  EXPECT_EQ(c.scdino.augmentation.vflip_p, 0.5);
}

TEST(Recipe, TheBlurIsDinosRelativeToTheCropOfImagesFramedAlike) {
  DataShape aligned = Shape(10000, 28);
  aligned.hflip_distance = 1.16;
  aligned.vflip_distance = 1.39;
  aligned.flip_sample = 1280;
  // 28 px crops: an eighth of a 224 px crop, an eighth of its sigma.
  auto small = Values(*DeriveRecipe(aligned, RecipeConfig()));
  EXPECT_EQ(small["scdino.augmentation.blur_sigma"], "[0.0125, 0.1875]");
  aligned.height = aligned.width = 300;
  EXPECT_EQ(Values(*DeriveRecipe(aligned, RecipeConfig()))["scdino.augmentation.blur_sigma"], "[0.1, 1.5]");
  // Cells (lying every which way, or not measured) keep DINO's blur.
  EXPECT_EQ(Values(*DeriveRecipe(Shape(10000, 28), RecipeConfig())).count("scdino.augmentation.blur_sigma"), 0u);
  aligned.height = aligned.width = 28;
  RunConfig c = RecipeConfig("", ", augmentation: {blur_sigma: [0.5, 1]}");
  c = Applied(WithRecipe(c, *DeriveRecipe(aligned, c)));
  EXPECT_EQ(c.scdino.augmentation.blur_sigma[0], 0.5);
}

TEST(Recipe, ScalesWithTheDataSet) {
  auto tiny = Values(*DeriveRecipe(Shape(1800, 32), RecipeConfig()));
  EXPECT_EQ(tiny[H + "patch_size"], "4");  // 8 x 8 tokens on 32 px
  EXPECT_EQ(tiny[H + "global_crops_size"], "32");
  EXPECT_EQ(tiny[H + "local_crops_size"], "16");
  auto big = Values(*DeriveRecipe(Shape(1000000, 96, 1024), RecipeConfig()));
  EXPECT_EQ(big[H + "patch_size"], "8");
  EXPECT_EQ(big[H + "arch"], "vit_small");
  EXPECT_EQ(big[H + "out_dim"], "8192");
  auto huge_images = Values(*DeriveRecipe(Shape(5000, 300), RecipeConfig()));
  EXPECT_EQ(huge_images[H + "patch_size"], "16");
  EXPECT_EQ(huge_images[H + "global_crops_size"], "224");
  // More images: more prototypes, more steps, a lower peak rate, a slower teacher.
  auto a = Values(*DeriveRecipe(Shape(600, 32), RecipeConfig()));
  auto b = Values(*DeriveRecipe(Shape(20000, 32), RecipeConfig()));
  EXPECT_LT(std::stoi(a[H + "out_dim"]), std::stoi(b[H + "out_dim"]));
  EXPECT_LT(std::stoi(a["train_scDINO.epochs"]) * (600 / 32), std::stoi(b["train_scDINO.epochs"]) * (20000 / 32));
  EXPECT_GT(std::stod(a[H + "lr"]), std::stod(b[H + "lr"]));
  EXPECT_LT(std::stod(a[H + "momentum_teacher"]), std::stod(b[H + "momentum_teacher"]));
}

TEST(Recipe, TheFilesKeysWinAndTheRestFollowThem) {
  RunConfig c = RecipeConfig(", epochs: 3, hyperparameters: {patch_size: 16}");
  auto r = DeriveRecipe(Shape(512, 64), c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  c = Applied(WithRecipe(c, *r));
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.hyperparameters.patch_size, 16);
  EXPECT_EQ(c.train.hyperparameters.global_crops_size, 64);  // a multiple of the file's patch
  EXPECT_EQ(c.train.hyperparameters.local_crops_size, 32);
  EXPECT_EQ(c.scdino.teacher_centering, "sinkhorn_knopp");
  bool said = false;
  for (const auto& line : DescribeRecipe(*r)) said |= line.find("train_scDINO.epochs: kept from the file") == 0;
  EXPECT_TRUE(said);
}

TEST(Recipe, WrittenOnceAndReadByTheOtherServices) {
  ScratchDir dir;
  RunConfig c = RecipeConfig();
  auto r = DeriveRecipe(Shape(1800, 32), c);
  ASSERT_TRUE(r.ok());
  const std::string path = dir.file("recipe.json");
  ASSERT_EQ(ReadRecipe(path).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteRecipe(path, Shape(1800, 32), *r).ok());
  auto back = ReadRecipe(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameData(back->data, Shape(1800, 32)));
  EXPECT_FALSE(SameData(back->data, Shape(1801, 32)));
  EXPECT_FALSE(SameData(back->data, Shape(1800, 64)));
  c = Applied(WithRecipe(c, back->values));
  EXPECT_EQ(c.train.hyperparameters.patch_size, 4);
  EXPECT_EQ(c.downstream.resize_length, 32);
  ASSERT_TRUE(WriteFileAtomic(path, "{\"values\": 3}").ok());
  ExpectInvalid(ReadRecipe(path).status(), path);
}

TEST(Recipe, RefusesTooFewImagesForTheBatchNamingTheNumbers) {
  DataShape d = Shape(40, 32, 64);
  d.ranks = 2;
  ExpectInvalid(DeriveRecipe(d, RecipeConfig()).status(), "40 images, fewer than one global batch of 64");
  ExpectInvalid(CheckDataFitsRun(d, RecipeConfig()), "at most 20 images per rank");
}

TEST(Recipe, RefusesImagesSmallerThanThePatchOrTheCrops) {
  ExpectInvalid(DeriveRecipe(Shape(512, 12), RecipeConfig()).status(), "12 x 12 px; scdino.recipe: auto needs at least 16");
  RunConfig manual = RecipeConfig(", hyperparameters: {patch_size: 8, global_crops_size: 48, local_crops_size: 24}");
  ExpectInvalid(CheckDataFitsRun(Shape(512, 20), manual), "20 x 20 px, smaller than the local crops (24 px");
  ExpectInvalid(CheckDataFitsRun(Shape(512, 6), manual), "smaller than the patch (8 px");
  EXPECT_TRUE(CheckDataFitsRun(Shape(512, 24), manual).ok());
}

TEST(Recipe, KeysOfTheWrongTypeAreRefusedByName) {
  auto bad = ParseRunConfig("scdino: {recipe: 3}\n", "cfg.yaml");
  ExpectInvalid(bad.status(), "scdino.recipe");
  bad = ParseRunConfig("scdino: {recipe: [auto]}\n", "cfg.yaml");
  ExpectInvalid(bad.status(), "scdino.recipe");
  bad = ParseRunConfig("scdino: {on_collapse: recover, max_recoveries: two}\n", "cfg.yaml");
  ExpectInvalid(bad.status(), "scdino.max_recoveries");
  bad = ParseRunConfig("scdino: {on_collapse: retry}\n", "cfg.yaml");
  ExpectInvalid(bad.status(), "recover");
}

// n 20 x 20 images of 2 classes, 3 channels, in class folders under dir.
void WriteRecipeCells(const std::string& dir, int64_t n) {
  data::SyntheticOptions so;
  so.classes = 2;
  so.per_class = n;
  so.channels = 3;
  so.size = 20;
  scdino::testing::WriteCellFolders(dir, so, "type_");
}

// recipe: auto over the cells of dir/<data>, 8 images a rank, run directory in dir.
StatusOr<RunConfig> AutoRecipeConfig(const ScratchDir& dir, const std::string& data) {
  return ParseRunConfig("meta: {name_of_run: r, output_dir: \"" + dir.path() + "\", dataset_dir: \"" + dir.file(data) +
                            "\", selected_channel_combination_per_run: [\"012\"]}\n"
                            "train_scDINO: {batch_size_per_gpu: 8}\nscdino: {recipe: auto}\n",
                        "cfg.yaml");
}

TEST(Recipe, SettledFromTheDataOnDisk) {
  ScratchDir dir;
  WriteRecipeCells(dir.file("cells"), 10);
  auto parsed = AutoRecipeConfig(dir, "cells");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const RunConfig c = *parsed;
  const auto d = IndexDataset(c);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto shape = MeasureData(c, *d, data::ProbeFirstImage(*d, c.image_prep()), 1);
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->images, 20);
  EXPECT_EQ(shape->height, 20);
  EXPECT_EQ(shape->channels, 3);
  auto plan = SettlePlan(c, *IndexDataset(c), *Coordinator::Single(), false);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->settings.train.hyperparameters.patch_size, 4);
  EXPECT_EQ(plan->settings.train.hyperparameters.global_crops_size, 20);
  EXPECT_EQ(plan->settings.train.hyperparameters.local_crops_size, 8);
  EXPECT_EQ(c.train.hyperparameters.patch_size, parsed->train.hyperparameters.patch_size) << "the config is not edited";
  EXPECT_TRUE(FileExists(RecipePath(c)));
  // Two ranks of 16: more than the 20 images.
  RunConfig two = *parsed;
  two.train.batch_size_per_gpu = 16;
  std::filesystem::remove(RecipePath(two));
  ExpectInvalid(SettlePlan(two, *IndexDataset(two), *Ranks(2)[0], false).status(),
                "20 images, fewer than one global batch of 32");
  // A combination the images cannot give: refused by the plan, which reads
  // the first image once, before any recipe is derived or written.
  RunConfig wide = *parsed;
  wide.meta.selected_channel_combination_per_run = {{0, 5}};
  std::filesystem::remove(RecipePath(wide));
  ExpectInvalid(SettlePlan(wide, *IndexDataset(wide), *Coordinator::Single(), false).status(),
                "selects channel 5");
  EXPECT_FALSE(FileExists(RecipePath(wide)));
}

// recipe.json records the data it was derived for: the same run directory
// over other data derives anew on a fresh start and refuses a resume.
TEST(Recipe, OtherDataDerivesAnewOnAFreshStartAndRefusesAResume) {
  ScratchDir dir;
  WriteRecipeCells(dir.file("small"), 10);
  WriteRecipeCells(dir.file("large"), 40);
  auto config_for = [&](const std::string& data) {
    auto parsed = AutoRecipeConfig(dir, data);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return *parsed;
  };
  const RunConfig small = config_for("small");
  auto small_plan = SettlePlan(small, *IndexDataset(small), *Coordinator::Single(), false);
  ASSERT_TRUE(small_plan.ok()) << small_plan.status().ToString();
  const std::string path = RecipePath(small);
  auto written = ReadRecipe(path);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->data.images, 20);

  const RunConfig large = config_for("large");
  const auto refused = SettlePlan(large, *IndexDataset(large), *Coordinator::Single(), /*resuming=*/true);
  ExpectInvalid(refused.status(), path + " was derived for 20 images of 20 x 20 px, 3 channels, from " +
                                      dir.file("small") + ", but the data now is 80 images of 20 x 20 px, 3 "
                                      "channels, from " + dir.file("large"));
  ExpectInvalid(refused.status(), "--no-resume");
  EXPECT_EQ(ReadRecipe(path)->data.images, 20) << "a refused resume leaves the file as it was";

  auto plan = SettlePlan(large, *IndexDataset(large), *Coordinator::Single(), /*resuming=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_FALSE(plan->why.empty());
  EXPECT_NE(plan->why.front().find("this fresh start's data is 80 images"), std::string::npos) << plan->why.front();
  auto rewritten = ReadRecipe(path);
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(rewritten->data.images, 80);
  // The values are those of the large data alone, as if no stale file had been there.
  RunConfig fresh = config_for("large");
  const auto d = IndexDataset(fresh);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto shape = MeasureData(fresh, *d, data::ProbeFirstImage(*d, fresh.image_prep()), 1);
  ASSERT_TRUE(shape.ok());
  auto derived = DeriveRecipe(*shape, fresh);
  ASSERT_TRUE(derived.ok());
  fresh = Applied(WithRecipe(fresh, *derived));
  const auto& settled = plan->settings;
  EXPECT_EQ(settled.train.epochs, fresh.train.epochs);
  EXPECT_EQ(settled.train.hyperparameters.lr, fresh.train.hyperparameters.lr);
  EXPECT_EQ(settled.train.hyperparameters.momentum_teacher, fresh.train.hyperparameters.momentum_teacher);
  EXPECT_NE(settled.train.epochs, small_plan->settings.train.epochs) << "the recipe depends on the image count";
}

// The plan is rank 0's decision (DESIGN, round 4): another rank reads
// neither the data nor recipe.json for it, and its read of the checkpoint
// is not used. Here rank 1's node sees no files and read another batch
// from the checkpoint: it ends with rank 0's settings exactly, and rank 0's
// failure reaches it.
TEST(Recipe, RankZeroSettlesThePlanAndEveryRankTakesIt) {
  ScratchDir dir;
  WriteRecipeCells(dir.file("cells"), 10);
  auto parsed = AutoRecipeConfig(dir, "cells");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const RunConfig config = *parsed;
  // What each rank read of the checkpoint: rank 0 halves the batch (an
  // elastic resume); rank 1's node showed an older file.
  auto checkpoint_of = [](int64_t batch) {
    return std::vector<RecipeValue>{
        {"train_scDINO.batch_size_per_gpu", std::to_string(batch), "the checkpoint's global batch", false}};
  };
  auto ranks = Ranks(2);
  StatusOr<RunPlan> got0 = Status::Internal("not run"), got1 = Status::Internal("not run");
  std::thread other([&] { got1 = SettlePlan(config, data::Dataset{}, *ranks[1], false, checkpoint_of(2)); });
  got0 = SettlePlan(config, *IndexDataset(config), *ranks[0], false, checkpoint_of(4));
  other.join();
  ASSERT_TRUE(got0.ok()) << got0.status().ToString();
  ASSERT_TRUE(got1.ok()) << got1.status().ToString();
  EXPECT_FALSE(got0->why.empty());
  EXPECT_EQ(got0->why.front(), "resume: the checkpoint's global batch");
  EXPECT_TRUE(got1->why.empty()) << "rank 0 logs the plan";
  const auto& s0 = got0->settings;
  const auto& s1 = got1->settings;
  EXPECT_EQ(s0.train.batch_size_per_gpu, 4);
  EXPECT_EQ(s1.train.batch_size_per_gpu, 4);
  const auto& h0 = s0.train.hyperparameters;
  const auto& h1 = s1.train.hyperparameters;
  EXPECT_EQ(h1.global_crops_size, 20);
  EXPECT_EQ(h1.global_crops_size, h0.global_crops_size);
  EXPECT_EQ(h1.local_crops_size, h0.local_crops_size);
  EXPECT_EQ(h1.patch_size, h0.patch_size);
  EXPECT_EQ(h1.arch, h0.arch);
  EXPECT_EQ(h1.lr, h0.lr);
  EXPECT_EQ(h1.out_dim, h0.out_dim);
  EXPECT_EQ(s1.train.epochs, s0.train.epochs);
  EXPECT_EQ(s1.scdino.augmentation.blur_sigma, s0.scdino.augmentation.blur_sigma);
  EXPECT_EQ(RecipeValuesJson(got1->recipe), RecipeValuesJson(got0->recipe));
  // The recipe was derived for rank 0's global batch of 8 (2 ranks x 4).
  EXPECT_EQ(ReadRecipe(RecipePath(config))->data.global_batch, 8);

  // Rank 0 fails (two ranks of 16 are more than the 20 images): so does rank 1, saying why.
  std::filesystem::remove(RecipePath(config));
  auto again = Ranks(2);
  std::thread follower([&] { got1 = SettlePlan(config, data::Dataset{}, *again[1], false, checkpoint_of(16)); });
  got0 = SettlePlan(config, *IndexDataset(config), *again[0], false, checkpoint_of(16));
  follower.join();
  ExpectInvalid(got0.status(), "fewer than one global batch of 32");
  ASSERT_FALSE(got1.ok());
  EXPECT_NE(got1.status().message().find("rank 0 failed at 'plan'"), std::string::npos) << got1.status().ToString();
  EXPECT_NE(got1.status().message().find("fewer than one global batch of 32"), std::string::npos);
}

// A plan's settings are the file's, then the recipe's where the file is
// silent, then the resume's whatever the file says; refusals name the file.
TEST(Recipe, APlansSettingsTakeTheFileTheRecipeThenTheResume) {
  auto parsed = ParseRunConfig("meta: {dataset_dir: /d}\ntrain_scDINO: {epochs: 12, batch_size_per_gpu: 8}\n"
                               "scdino: {recipe: auto}\n",
                               "plan.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const std::vector<RecipeValue> recipe{{"train_scDINO.epochs", "40", "", false},
                                        {"train_scDINO.hyperparameters.lr", "0.002", "", false}};
  const std::vector<RecipeValue> resume{{"train_scDINO.batch_size_per_gpu", "16", "", false}};
  auto s = PlanSettings(*parsed, recipe, resume);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.epochs, 12) << "the file's key wins over the recipe";
  EXPECT_DOUBLE_EQ(s->train.hyperparameters.lr, 0.002);
  EXPECT_EQ(s->train.batch_size_per_gpu, 16) << "the resume's value wins over the file";
  EXPECT_EQ(parsed->train.batch_size_per_gpu, 8);
  ExpectInvalid(PlanSettings(*parsed, {{"train_scDINO.hyperparameters.warmup_epochs", "13", "", false}}, {}).status(),
                "plan.yaml with the derived settings: train_scDINO.hyperparameters.warmup_epochs: expected at most "
                "train_scDINO.epochs (12), got 13");
  ExpectInvalid(PlanSettings(*parsed, {}, {{"train_scDINO.batch_size_per_gpu", "[1]", "", false}}).status(),
                "train_scDINO.batch_size_per_gpu");
  ExpectInvalid(PlanSettings(*parsed, {{"scdino.no_such_key", "1", "", false}}, {}).status(), "scdino.no_such_key");
}

}  // namespace
}  // namespace scdino::run
