#include "training/train_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace scdino::training {
namespace {

const std::string H = "train_scDINO.hyperparameters.";

TrainPlan Plan() {
  TrainPlan p;
  p.schedule.lr = 0.01;
  p.schedule.momentum_teacher = 0.98;
  p.dino.teacher_temp = 0.02;
  p.dino.warmup_teacher_temp = 0.02;
  p.dino.koleo_loss_weight = 0.0;
  p.dino.centering = model::TeacherCentering::kCenter;
  return p;
}

std::map<std::string, std::string> Values(const std::vector<SettingChange>& changes) {
  std::map<std::string, std::string> m;
  for (const auto& c : changes) m[c.key] = c.value;
  return m;
}

TEST(TrainPlan, SaferSettingsAfterACollapse) {
  TrainPlan p = Plan();
  auto uniform = Values(SaferSettings(p, "uniform_collapse"));
  EXPECT_EQ(uniform[H + "lr"], "0.005");
  EXPECT_EQ(uniform[H + "teacher_temp"], "0.01");  // sharper
  EXPECT_EQ(uniform[H + "momentum_teacher"], "0.99");
  EXPECT_EQ(uniform["scdino.koleo_loss_weight"], "0.1");
  auto onehot = Values(SaferSettings(p, "onehot_collapse"));
  EXPECT_EQ(onehot["scdino.teacher_centering"], "sinkhorn_knopp");
  EXPECT_EQ(onehot.count(H + "teacher_temp"), 0u);
  // Applied, they are the plan's options: the schedules' and the model's.
  ASSERT_TRUE(ApplySettings(p, SaferSettings(p, "uniform_collapse"), "test").ok());
  EXPECT_DOUBLE_EQ(p.schedule.lr, 0.005);
  EXPECT_DOUBLE_EQ(p.schedule.momentum_teacher, 0.99);
  EXPECT_DOUBLE_EQ(p.dino.teacher_temp, 0.01);
  EXPECT_DOUBLE_EQ(p.dino.warmup_teacher_temp, 0.01);
  EXPECT_DOUBLE_EQ(p.dino.koleo_loss_weight, 0.1);
  // A second one-hot collapse under Sinkhorn-Knopp softens the teacher.
  ASSERT_TRUE(ApplySettings(p, SaferSettings(p, "onehot_collapse"), "test").ok());
  EXPECT_EQ(p.dino.centering, model::TeacherCentering::kSinkhornKnopp);
  auto again = Values(SaferSettings(p, "onehot_collapse"));
  EXPECT_EQ(again[H + "teacher_temp"], "0.02");
}

TEST(TrainPlan, ARecordedSettingItCannotApplyIsRefusedByNameAndChangesNothing) {
  TrainPlan p = Plan();
  const std::vector<std::pair<SettingChange, std::string>> bad = {
      {{H + "epochs", "3", ""}, "not one a recovery changes"},
      {{H + "lr", "fast", ""}, "expected a finite number"},
      {{H + "lr", "-1", ""}, "expected a finite number"},
      {{H + "lr", "", ""}, "expected a finite number"},
      {{"scdino.teacher_centering", "median", ""}, "expected center or sinkhorn_knopp"},
  };
  for (const auto& [change, says] : bad) {
    // The good first change must not stay either.
    const Status s = ApplySettings(p, {{H + "teacher_temp", "0.05", ""}, change}, "ckpt.safetensors");
    ASSERT_FALSE(s.ok()) << change.key << "=" << change.value;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ckpt.safetensors: recovery setting " + change.key), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
    EXPECT_DOUBLE_EQ(p.dino.teacher_temp, 0.02);
    EXPECT_DOUBLE_EQ(p.schedule.lr, 0.01);
  }
}

}  // namespace
}  // namespace scdino::training
