#include <gtest/gtest.h>

#include "model/dino_loss.h"
#include "model/schedules.h"

namespace scdino::model {
namespace {

TEST(Schedules, LinspaceMatchesNumpy) {
  EXPECT_EQ(Linspace(0, 1, 0).size(), 0u);
  EXPECT_EQ(Linspace(3, 9, 1), std::vector<double>{3});
  auto v = Linspace(0.04, 0.07, 4);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_DOUBLE_EQ(v[0], 0.04);
  EXPECT_DOUBLE_EQ(v[3], 0.07);
  EXPECT_NEAR(v[1], 0.05, 1e-15);
}

TEST(Schedules, CosineWarmupThenDecay) {
  auto s = CosineSchedule(1.0, 0.0, 4, 10, 1);
  ASSERT_EQ(s.size(), 40u);
  EXPECT_DOUBLE_EQ(s[0], 0.0);
  EXPECT_DOUBLE_EQ(s[9], 1.0);   // warm-up ends on the base value
  EXPECT_DOUBLE_EQ(s[10], 1.0);  // cosine starts there
  for (size_t i = 11; i < s.size(); ++i) EXPECT_LT(s[i], s[i - 1]);
  EXPECT_GT(s.back(), 0.0);
  EXPECT_THROW(CosineSchedule(1, 0, 2, 5, 3), std::invalid_argument);
}

TEST(Schedules, MakeSchedulesScalesLrByGlobalBatch) {
  ScheduleOptions o;
  o.lr = 0.0005;
  o.warmup_epochs = 0;
  o.epochs = 2;
  o.niter_per_epoch = 3;
  o.global_batch = 512;
  auto s = MakeSchedules(o);
  EXPECT_DOUBLE_EQ(s.lr[0], 0.001);
  EXPECT_DOUBLE_EQ(s.weight_decay[0], 0.04);
  EXPECT_DOUBLE_EQ(s.momentum[0], 0.996);
  EXPECT_LT(s.momentum[5], 1.0);
  EXPECT_GT(s.momentum[5], s.momentum[0]);
}

TEST(Schedules, TeacherTemperatureWarmup) {
  auto t = TeacherTempSchedule(0.04, 0.07, 3, 5);
  const std::vector<double> want{0.04, 0.055, 0.07, 0.07, 0.07};
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-15) << i;
  EXPECT_THROW(TeacherTempSchedule(0.04, 0.07, 6, 5), std::invalid_argument);
}

TEST(DinoLoss, CenterMovesTowardsTheBatchMean) {
  DinoLoss loss(DinoLossOptions(4, 2).epochs(1).center_momentum(0.5));
  auto teacher = torch::tensor({{1.0f, 2.0f, 3.0f, 4.0f}, {3.0f, 2.0f, 1.0f, 0.0f}});
  auto sum = loss->batch_sum(teacher);
  EXPECT_TRUE(sum.allclose(torch::tensor({{4.0f, 4.0f, 4.0f, 4.0f}})));
  loss->update_center(sum / 2.0);
  auto want = torch::tensor({{1.0f, 1.0f, 1.0f, 1.0f}});  // 0.5 * 0 + 0.5 * mean
  EXPECT_TRUE(loss->center.allclose(want));
}

TEST(DinoLoss, SkipsEqualViewsAndAverages) {
  // With identical student and teacher distributions for every view the loss
  // is the entropy of the sharpened teacher, whatever the number of crops.
  const int64_t B = 3, K = 8;
  auto logits = torch::randn({1, K}).expand({B, K});
  for (int64_t ncrops : {2, 4}) {
    DinoLoss loss(DinoLossOptions(K, ncrops).epochs(1).teacher_temp(0.1).warmup_teacher_temp(0.1).student_temp(0.1));
    auto l = loss(logits.repeat({ncrops, 1}), logits.repeat({2, 1}), 0);
    auto p = torch::softmax(logits[0] / 0.1, -1);
    auto entropy = -(p * torch::log_softmax(logits[0] / 0.1, -1)).sum();
    EXPECT_NEAR(l.item<double>(), entropy.item<double>(), 1e-5) << ncrops;
  }
}

}  // namespace
}  // namespace scdino::model
