#include "model/health.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/dino_loss.h"
#include "support/tiny_model.h"

namespace scdino::model {
namespace {

// Entropy of a probability row, in double, one element at a time.
double Entropy(const torch::Tensor& p) {
  const auto v = p.to(torch::kDouble).contiguous();
  double h = 0.0;
  for (int64_t i = 0; i < v.numel(); ++i) {
    const double x = v.data_ptr<double>()[i];
    if (x > 0) h -= x * std::log(x);
  }
  return h;
}

TEST(Health, SignalsMatchABruteForceComputationOverTheLossPairs) {
  torch::manual_seed(1);
  const int64_t K = 8, B = 3, ncrops = 4;
  const double temp = 0.07;
  auto loss = DinoLoss(DinoLossOptions(K, ncrops).teacher_temp(temp).warmup_teacher_temp(temp).epochs(1));
  loss->center.copy_(torch::randn({1, K}) * 0.3);
  const auto teacher = torch::randn({2 * B, K});
  const auto student = torch::randn({ncrops * B, K});
  const auto cls = torch::randn({2 * B, 5});
  const auto l = loss->forward(student, teacher, 0);
  const double center_norm = loss->center.norm().item<double>();
  const auto h = HealthFromSums(HealthSums(loss->teacher_targets(teacher, 0), cls, l), 2.0 * B, K, center_norm);

  const auto t = torch::softmax((teacher - loss->center) / temp, -1);
  double mean_h = 0.0;
  for (int64_t r = 0; r < 2 * B; ++r) mean_h += Entropy(t[r]) / (2.0 * B);
  EXPECT_NEAR(h.teacher_entropy, mean_h, 1e-5);
  EXPECT_NEAR(h.teacher_entropy_ratio, mean_h / std::log(8.0), 1e-5);
  EXPECT_NEAR(h.teacher_batch_entropy, Entropy(t.mean(0)), 1e-5);
  EXPECT_DOUBLE_EQ(h.center_norm, center_norm);
  // KL(teacher view || student view) over every pair of different views.
  double kl = 0.0;
  int pairs = 0;
  for (int64_t iq = 0; iq < 2; ++iq) {
    for (int64_t v = 0; v < ncrops; ++v) {
      if (v == iq) continue;
      for (int64_t b = 0; b < B; ++b) {
        const auto p = t[iq * B + b].to(torch::kDouble);
        const auto logq = torch::log_softmax(student[v * B + b].to(torch::kDouble) / 0.1, -1);
        kl += (p * (p.log() - logq)).sum().item<double>() / B;
      }
      ++pairs;
    }
  }
  EXPECT_NEAR(h.student_teacher_kl, kl / pairs, 1e-4);
  const auto n = torch::nn::functional::normalize(cls, torch::nn::functional::NormalizeFuncOptions().dim(-1));
  EXPECT_NEAR(h.backbone_cls_std, n.std(0, false).mean().item<double>(), 1e-6);
}

TEST(Health, SumsOfTwoRanksGiveTheSignalsOfTheWholeBatchWhereTheyAreRowMeans) {
  torch::manual_seed(2);
  const auto targets = torch::softmax(torch::randn({8, 16}) / 0.1, -1);
  const auto cls = torch::randn({8, 4});
  const auto loss = torch::tensor(3.0f);
  const auto whole = HealthFromSums(HealthSums(targets, cls, loss), 8, 16, 0.0);
  const auto two = HealthSums(targets.slice(0, 0, 4), cls.slice(0, 0, 4), loss) +
                   HealthSums(targets.slice(0, 4), cls.slice(0, 4), loss);
  const auto split = HealthFromSums(two, 8, 16, 0.0);
  EXPECT_NEAR(split.teacher_entropy, whole.teacher_entropy, 1e-5);
  EXPECT_NEAR(split.student_teacher_kl, whole.student_teacher_kl, 1e-5);
  // The batch-mean entropy is each rank's, averaged: at most the whole's.
  EXPECT_LE(split.teacher_batch_entropy, whole.teacher_batch_entropy + 1e-6);
}

TEST(Health, JudgesUniformAndOneHotCollapseAndAHealthyTeacher) {
  const int64_t K = 64, rows = 16;
  const auto cls = torch::randn({rows, 8});
  // Uniform: every target uniform; the loss then is ln K (the student uniform too).
  auto uniform = HealthFromSums(
      HealthSums(torch::full({rows, K}, 1.0 / K), cls, torch::tensor(static_cast<float>(std::log(64.0)))), rows, K,
      0.0);
  EXPECT_NEAR(uniform.teacher_entropy_ratio, 1.0, 1e-5);
  EXPECT_NEAR(uniform.student_teacher_kl, 0.0, 1e-5);
  EXPECT_EQ(JudgeCollapse(uniform), Collapse::kUniform);
  EXPECT_STREQ(CollapseName(JudgeCollapse(uniform)), "uniform_collapse");
  EXPECT_NE(DescribeCollapse(Collapse::kUniform, uniform).find("KL"), std::string::npos);
  // One-hot: every image on prototype 3.
  auto same = torch::zeros({rows, K});
  same.select(1, 3).fill_(1.0);
  auto onehot = HealthFromSums(HealthSums(same, cls, torch::tensor(1.0f)), rows, K, 0.0);
  EXPECT_LT(onehot.teacher_batch_entropy, 0.01);
  EXPECT_EQ(JudgeCollapse(onehot), Collapse::kOneHot);
  EXPECT_STREQ(CollapseName(Collapse::kOneHot), "onehot_collapse");
  // Healthy: sharp, and each image on its own prototype.
  auto diverse = torch::zeros({rows, K});
  for (int64_t r = 0; r < rows; ++r) diverse[r][r] = 1.0;
  auto healthy = HealthFromSums(HealthSums(diverse, cls, torch::tensor(2.0f)), rows, K, 0.0);
  EXPECT_NEAR(healthy.teacher_batch_entropy, std::log(16.0), 1e-3);
  EXPECT_EQ(JudgeCollapse(healthy), Collapse::kHealthy);
  EXPECT_STREQ(CollapseName(Collapse::kHealthy), "healthy");
}

TEST(Health, AverageIsTheMeanOfTheSteps) {
  HealthAverage a;
  EXPECT_EQ(a.Mean().teacher_entropy, 0.0);
  DinoHealth x, y;
  x.teacher_entropy = 1.0;
  x.center_norm = 4.0;
  y.teacher_entropy = 3.0;
  y.backbone_cls_std = 2.0;
  a.Add(x);
  a.Add(y);
  EXPECT_EQ(a.steps(), 2);
  EXPECT_DOUBLE_EQ(a.Mean().teacher_entropy, 2.0);
  EXPECT_DOUBLE_EQ(a.Mean().center_norm, 2.0);
  EXPECT_DOUBLE_EQ(a.Mean().backbone_cls_std, 1.0);
}

TEST(Health, ADinoStepReportsFiniteSignals) {
  torch::manual_seed(3);
  auto o = testing::TinyDino();
  Dino dino(o);
  StepInput in;
  for (int i = 0; i < 2; ++i) in.crops.push_back(torch::rand({2, 2, 16, 16}));
  for (int i = 0; i < 2; ++i) in.crops.push_back(torch::rand({2, 2, 8, 8}));
  in.lr = 1e-3;
  const auto center_before = dino.loss->center.norm().item<double>();
  const auto step = dino.Step(in);
  const auto out = dino.Values(step);
  ASSERT_TRUE(out.finite);
  EXPECT_GT(out.health.teacher_entropy, 0.0);
  EXPECT_LE(out.health.teacher_entropy_ratio, 1.0 + 1e-6);
  EXPECT_NEAR(out.health.student_teacher_kl, std::max(0.0, out.loss - out.health.teacher_entropy), 1e-4);
  EXPECT_DOUBLE_EQ(out.health.center_norm, center_before);  // before the update
  EXPECT_GT(out.health.backbone_cls_std, 0.0);
}

}  // namespace
}  // namespace scdino::model
