// The trainer's metric set, scraped from a real exporter.
#include "trainer/trainer_metrics.h"

#include <gtest/gtest.h>

#include "metrics/exporter.h"
#include "support/scrape.h"

namespace scdino::metrics {
namespace {

using scdino::testing::Scrape;
using scdino::testing::Value;

TEST(TrainerMetrics, StepsAndCheckpointsMoveTheSeries) {
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  auto e = Exporter::Start(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  TrainerMetrics m((*e)->registry(), torch::kCPU);
  training::StepReport r;
  r.iteration = 1;
  r.epoch = 0;
  r.images = 30;
  r.skipped_images = 2;
  r.loss = 8.5;
  r.lr = 1e-3;
  r.step_seconds = 0.5;
  m.OnStep(r);
  r.finite = false;
  r.images = 32;
  r.skipped_images = 0;
  m.OnStep(r);
  training::CheckpointReport c;
  c.seconds = 0.2;
  c.unix_ms = 1700000000000;
  m.OnCheckpoint(c);
  const std::string text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_trainer_iterations_total"), 2.0);
  EXPECT_EQ(Value(text, "scdino_trainer_images_total"), 62.0);
  EXPECT_EQ(Value(text, "scdino_trainer_skipped_images_total"), 2.0);
  EXPECT_EQ(Value(text, "scdino_trainer_nonfinite_steps_total"), 1.0);
  EXPECT_EQ(Value(text, "scdino_trainer_loss"), 8.5);  // a non-finite step does not overwrite it
  EXPECT_EQ(Value(text, "scdino_trainer_step_duration_seconds_count"), 2.0);
  EXPECT_EQ(Value(text, "scdino_trainer_checkpoint_duration_seconds_count"), 1.0);
  EXPECT_EQ(Value(text, "scdino_trainer_last_checkpoint_timestamp_seconds"), 1.7e9);
  EXPECT_EQ(text.find("gpu_memory"), std::string::npos) << "CPU runs have no GPU memory series";
}

TEST(TrainerMetrics, LearningChecksAndRecoveriesAreExported) {
  ExporterOptions o;
  o.listen_address = "127.0.0.1";
  auto e = Exporter::Start(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  TrainerMetrics m((*e)->registry(), torch::kCPU);
  std::string text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_trainer_knn_top1_ratio{model=\"trained\"}"), 0.0);
  EXPECT_EQ(Value(text, "scdino_trainer_learning_check_epoch"), 0.0);
  training::LearningReport l;
  l.epoch = 4;
  l.trained_top1 = 0.75;
  l.random_top1 = 0.5;
  l.pixels_top1 = 0.7;
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"learned\"}"), 0.0);
  m.OnLearning(l);
  m.OnRecovery(training::RecoveryReport{});
  m.OnRecovery(training::RecoveryReport{});
  text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_trainer_knn_top1_ratio{model=\"trained\"}"), 0.75);
  EXPECT_EQ(Value(text, "scdino_trainer_knn_top1_ratio{model=\"random_init\"}"), 0.5);
  EXPECT_EQ(Value(text, "scdino_trainer_knn_top1_ratio{model=\"raw_pixels\"}"), 0.7);
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"learned\"}"), 1.0);
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"did_not_learn\"}"), 0.0);
  // A teacher below the pixels did not learn, whatever the random ViT.
  l.pixels_top1 = 0.8;
  m.OnLearning(l);
  text = Scrape((*e)->port());
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"learned\"}"), 0.0);
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"did_not_learn\"}"), 1.0);
  EXPECT_EQ(Value(text, "scdino_trainer_learned{verdict=\"cannot_tell\"}"), 0.0);
  EXPECT_EQ(Value(text, "scdino_trainer_learning_check_epoch"), 4.0);
  EXPECT_EQ(Value(text, "scdino_trainer_recoveries_total"), 2.0);
}

}  // namespace
}  // namespace scdino::metrics
