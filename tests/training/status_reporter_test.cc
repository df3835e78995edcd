#include "training/status_reporter.h"

#include <gtest/gtest.h>

namespace scdino::training {
namespace {

TEST(StatusReporter, PublishesProgressScheduleHealthAndTheEnd) {
  RunControl control;
  StatusReporter r(&control);
  r.Start(/*iteration=*/4, /*niter=*/4, /*epochs=*/3, /*images_per_iteration=*/32);
  auto s = control.Snapshot();
  EXPECT_EQ(s.state, RunState::kRunning);
  EXPECT_EQ(s.iterations, 12);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.items_total, 384);
  EXPECT_EQ(s.items_done, 128);

  StepReport step;
  step.iteration = 5;
  step.loss = 4.5;
  step.lr = 1e-3;
  step.teacher_temp = 0.04;
  step.step_seconds = 0.5;
  r.Step(step, /*nonfinite_steps=*/1);
  s = control.Snapshot();
  EXPECT_EQ(s.iteration, 5);
  EXPECT_EQ(s.items_done, 160);
  EXPECT_DOUBLE_EQ(s.items_per_second, 64.0);  // 2 iterations/s x 32 images
  EXPECT_DOUBLE_EQ(s.eta_seconds, 3.5);        // 7 iterations left
  EXPECT_DOUBLE_EQ(s.trainer.loss, 4.5);
  EXPECT_DOUBLE_EQ(s.trainer.teacher_temperature, 0.04);
  EXPECT_EQ(s.trainer.nonfinite_steps, 1);

  HealthReport h;
  h.health.teacher_entropy = 2.0;
  h.health.teacher_entropy_ratio = 0.5;
  h.health.student_teacher_kl = 0.7;
  h.health.teacher_batch_entropy = 3.0;
  h.health.center_norm = 1.5;
  h.health.backbone_cls_std = 0.02;
  h.collapse = "healthy";
  r.Health(h);
  s = control.Snapshot();
  EXPECT_DOUBLE_EQ(s.trainer.teacher_entropy, 2.0);
  EXPECT_DOUBLE_EQ(s.trainer.teacher_entropy_ratio, 0.5);
  EXPECT_DOUBLE_EQ(s.trainer.student_teacher_kl, 0.7);
  EXPECT_DOUBLE_EQ(s.trainer.teacher_batch_entropy, 3.0);
  EXPECT_DOUBLE_EQ(s.trainer.center_norm, 1.5);
  EXPECT_DOUBLE_EQ(s.trainer.backbone_cls_std, 0.02);
  EXPECT_EQ(s.trainer.collapse, "healthy");

  LearningReport l;
  l.epoch = 4;
  l.trained_top1 = 0.7;
  l.random_top1 = 0.6;
  l.pixels_top1 = 0.72;
  l.margin = 0.01;
  r.Learning(l);
  RecoveryReport rec;
  rec.recovery = 1;
  rec.max_recoveries = 2;
  rec.verdict = "uniform_collapse";
  rec.from_iteration = 40;
  rec.to_iteration = 32;
  r.Recovery(rec);
  s = control.Snapshot();
  EXPECT_EQ(s.trainer.learning_check_epoch, 4);
  EXPECT_DOUBLE_EQ(s.trainer.knn_top1, 0.7);
  EXPECT_DOUBLE_EQ(s.trainer.knn_random_top1, 0.6);
  EXPECT_DOUBLE_EQ(s.trainer.knn_pixels_top1, 0.72);
  EXPECT_DOUBLE_EQ(s.trainer.learning_margin, 0.01);
  EXPECT_EQ(s.trainer.learning_verdict, "did_not_learn");  // below the pixels
  EXPECT_EQ(s.trainer.recoveries, 1);
  EXPECT_EQ(s.trainer.max_recoveries, 2);
  EXPECT_EQ(s.trainer.last_recovery, "uniform_collapse at iteration 40, back to 32");

  r.End(/*completed=*/false, Status::FailedPrecondition("training collapsed"));
  s = control.Snapshot();
  EXPECT_EQ(s.state, RunState::kFailed);
  EXPECT_NE(s.error.find("training collapsed"), std::string::npos);
}

TEST(StatusReporter, EndsCompletedOrStoppedAndANullControlIsANoOp) {
  RunControl done, stopped;
  StatusReporter(&done).End(true, Status::Ok());
  StatusReporter(&stopped).End(false, Status::Ok());
  EXPECT_EQ(done.Snapshot().state, RunState::kCompleted);
  EXPECT_EQ(stopped.Snapshot().state, RunState::kStopped);
  StatusReporter none(nullptr);
  none.Start(0, 1, 1, 1);
  none.Health(HealthReport{});
  none.End(false, Status::Internal("x"));  // nothing to publish to, nothing breaks
}

}  // namespace
}  // namespace scdino::training
