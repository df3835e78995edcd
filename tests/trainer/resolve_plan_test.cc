#include "trainer/resolve_plan.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace scdino::trainer {
namespace {

run::RunConfig Parse(const std::string& yaml) {
  auto c = run::ParseRunConfig(yaml, "cfg.yaml");
  if (!c.ok()) throw std::runtime_error(c.status().ToString());
  return std::move(c).value();
}

const char* kConfig = R"(meta:
  name_of_run: r1
  output_dir: /runs
  dataset_dir: /data
  seed: 7
  selected_channel_combination_per_run: ["0134", "2"]
train_scDINO:
  epochs: 12
  saveckp_freq: 4
  batch_size_per_gpu: 16
  hyperparameters:
    arch: vit_tiny
    patch_size: 8
    lr: 0.002
    momentum_teacher: 0.99
    teacher_temp: 0.03
    local_crops_size: 48
    global_crops_size: 96
scdino:
  channel_combination: 0
  log_every: 5
  on_collapse: recover
  max_recoveries: 3
  on_nonfinite_loss: skip
  keep_checkpoints: 2
  checkpoint_every_minutes: 30
  elastic_resume: batch_per_gpu
  koleo_loss_weight: 0.2
)";

TEST(ResolvePlan, TheLoopsPlanIsTheConfigsTrainingKeys) {
  const auto c = Parse(kConfig);
  const auto p = TrainPlanOf(c, torch::kCPU);
  EXPECT_EQ(p.run_dir, "/runs/r1/scDINO_ViT_channel_0_1_3_4");  // one of two combinations: its own folder
  EXPECT_EQ(p.origin, "cfg.yaml");
  EXPECT_EQ(p.recorded_config, kConfig);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_EQ(p.batch_size_per_gpu, 16);
  EXPECT_EQ(p.epochs, 12);
  EXPECT_EQ(p.channels, (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_NE(p.channels_key.find("selected_channel_combination_per_run[0]"), std::string::npos);
  EXPECT_EQ(p.dino.vit.in_chans(), 4);
  EXPECT_EQ(p.dino.vit.patch_size(), 8);
  EXPECT_DOUBLE_EQ(p.dino.teacher_temp, 0.03);
  EXPECT_DOUBLE_EQ(p.dino.koleo_loss_weight, 0.2);
  EXPECT_EQ(p.dino.precision, model::Precision::kFp32);
  EXPECT_DOUBLE_EQ(p.schedule.lr, 0.002);
  EXPECT_DOUBLE_EQ(p.schedule.momentum_teacher, 0.99);
  EXPECT_EQ(p.global_crops_size, 96);
  EXPECT_EQ(p.local_crops_size, 48);
  EXPECT_EQ(p.arch, "vit_tiny");
  EXPECT_EQ(p.checkpoints.every_epochs, 4);
  EXPECT_EQ(p.checkpoints.keep, 2);
  EXPECT_DOUBLE_EQ(p.checkpoints.every_minutes, 30.0);
  EXPECT_EQ(p.log_every, 5);
  EXPECT_FALSE(p.stop_on_nonfinite_loss);
  EXPECT_EQ(p.on_collapse, training::OnCollapse::kRecover);
  EXPECT_EQ(p.max_recoveries, 3);
  EXPECT_EQ(p.elastic_resume, "batch_per_gpu");
}

TEST(ResolvePlan, PrecisionIsResolvedForTheDevice) {
  const auto c = Parse(kConfig);  // use_fp16 defaults to true, precision auto
  EXPECT_EQ(TrainPlanOf(c, torch::Device(torch::kCUDA, 0), true).dino.precision, model::Precision::kBf16);
  EXPECT_EQ(TrainPlanOf(c, torch::Device(torch::kCUDA, 0), false).dino.precision, model::Precision::kFp16);
  EXPECT_TRUE(TrainPlanOf(c, torch::Device(torch::kCUDA, 0), false).dino.loss_scaling);
  EXPECT_EQ(TrainPlanOf(c).device, torch::Device(torch::kCPU));
}

TEST(ResolvePlan, ARecordedConfigSaysWhetherItTrainedUnderRecover) {
  const auto p = TrainPlanOf(Parse(kConfig));
  ASSERT_TRUE(p.recorded_recover);
  EXPECT_TRUE(p.recorded_recover(kConfig));
  EXPECT_FALSE(p.recorded_recover("scdino: {on_collapse: warn}\n"));
  EXPECT_FALSE(p.recorded_recover("not: [yaml"));
}

}  // namespace
}  // namespace scdino::trainer
