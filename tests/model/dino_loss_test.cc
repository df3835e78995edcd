// The teacher's targets (DINO's center, DINOv2's Sinkhorn-Knopp) and the
// KoLeo regulariser, against direct computations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/dino.h"
#include "model/dino_loss.h"

namespace scdino::model {
namespace {

DinoLoss MakeLoss(int64_t K, TeacherCentering centering, double temp = 0.05) {
  return DinoLoss(DinoLossOptions(K, 4).teacher_temp(temp).warmup_teacher_temp(temp).epochs(1).centering(centering));
}

TEST(DinoLoss, CenterTargetsAreTheCentredSharpenedSoftmax) {
  torch::manual_seed(3);
  auto loss = MakeLoss(8, TeacherCentering::kCenter, 0.05);
  loss->center.copy_(torch::randn({1, 8}));
  const auto t = torch::randn({6, 8});
  EXPECT_TRUE(torch::allclose(loss->teacher_targets(t, 0), torch::softmax((t - loss->center) / 0.05, -1)));
  // forward is the cross-entropy against those targets.
  const auto s = torch::randn({12, 8});
  EXPECT_TRUE(torch::allclose(loss->forward(s, t, 0), loss->cross_entropy(s, loss->teacher_targets(t, 0))));
}

// The cross-entropy, one matrix product over every pair of views, is the
// reference's loop over (teacher view, student view) pairs of different
// views, in value and gradient.
TEST(DinoLoss, TheCrossTermsInOneProductAreTheReferencesLoop) {
  torch::manual_seed(6);
  const int64_t V = 4, B = 3, K = 8;
  auto loss = MakeLoss(K, TeacherCentering::kCenter);
  const auto s = torch::randn({V * B, K}, torch::kFloat64).requires_grad_(true);
  const auto q = torch::softmax(torch::randn({2 * B, K}, torch::kFloat64), -1);
  const auto got = loss->cross_entropy(s, q);
  const auto logp = torch::log_softmax(s / 0.1, -1).chunk(V);
  const auto qs = q.chunk(2);
  torch::Tensor want = torch::zeros({}, torch::kFloat64);
  for (int64_t iq = 0; iq < 2; ++iq) {
    for (int64_t v = 0; v < V; ++v) {
      if (v != iq) want = want + torch::sum(-qs[iq] * logp[v], -1).mean();
    }
  }
  want = want / (2.0 * V - 2.0);
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-12);
  const auto g1 = torch::autograd::grad({got}, {s})[0];
  const auto g2 = torch::autograd::grad({want}, {s})[0];
  EXPECT_TRUE(torch::allclose(g1, g2, 1e-10, 1e-12));
}

TEST(DinoLoss, SinkhornKnoppSpreadsTheBatchOverThePrototypesWhereTheCenterGivesOneAnswer) {
  torch::manual_seed(4);
  const int64_t K = 16, rows = 32;
  // Every image nearly the same output: the softmax gives them all one
  // answer; the equipartition makes the images' answers differ.
  const auto t = torch::randn({1, K}).expand({rows, K}) + 0.02 * torch::randn({rows, K});
  auto sk = MakeLoss(K, TeacherCentering::kSinkhornKnopp);
  const auto q = sk->teacher_targets(t, 0);
  EXPECT_TRUE(torch::allclose(q.sum(1), torch::ones({rows}), 1e-4, 1e-5)) << "each image's target sums to 1";
  const auto per_prototype = q.sum(0) / rows;
  EXPECT_LT((per_prototype - 1.0 / K).abs().max().item<double>(), 0.2 / K) << per_prototype;
  const auto p = MakeLoss(K, TeacherCentering::kCenter)->teacher_targets(t, 0);
  EXPECT_GT(p.mean(0).max().item<double>(), 0.5) << "the plain softmax puts most of the batch on one prototype";

  // The same as the matrix scaling written out (DINOv2's order: the
  // prototypes' sums, then the images'), from the per-image softmax.
  auto Q = torch::softmax(t.to(torch::kDouble) / 0.05, -1).t() / rows;
  for (int i = 0; i < 3; ++i) {
    Q = Q / Q.sum(1, true) / K;
    Q = Q / Q.sum(0, true) / rows;
  }
  EXPECT_TRUE(torch::allclose(q.to(torch::kDouble), (Q * rows).t(), 1e-4, 1e-6));
}

TEST(DinoLoss, SinkhornKnoppSumsOverRanksThroughTheHook) {
  torch::manual_seed(5);
  const int64_t K = 8, rows = 12;
  const auto t = torch::randn({rows, K});
  auto sk = MakeLoss(K, TeacherCentering::kSinkhornKnopp);
  // One rank whose exchange doubles every sum: as two ranks holding the same
  // rows, whose equipartition is the one of those rows.
  int calls = 0;
  const auto q = sk->teacher_targets(t, 0, [&](torch::Tensor& x) {
    ++calls;
    x.mul_(2.0);
  });
  EXPECT_EQ(calls, 3) << "the prototypes' sums of each of the 3 iterations";
  EXPECT_TRUE(torch::allclose(q, sk->teacher_targets(t, 0), 1e-4, 1e-6));
}

TEST(DinoLoss, SinkhornKnoppLeavesTheCenterAlone) {
  auto sk = MakeLoss(8, TeacherCentering::kSinkhornKnopp);
  sk->update_center(torch::ones({1, 8}));
  EXPECT_EQ(sk->center.abs().sum().item<double>(), 0.0);
}

TEST(KoLeo, IsMinusTheMeanLogDistanceToTheNearestOtherRow) {
  torch::manual_seed(6);
  const auto x = torch::randn({10, 5});
  const auto n = torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(-1));
  double expected = 0.0;
  for (int64_t i = 0; i < 10; ++i) {
    double nearest = 1e9;
    for (int64_t j = 0; j < 10; ++j) {
      if (j != i) nearest = std::min(nearest, (n[i] - n[j]).norm().item<double>());
    }
    expected -= std::log(nearest) / 10.0;
  }
  EXPECT_NEAR(KoLeoLoss(x).item<double>(), expected, 1e-4);
  // Spread-out rows score lower than bunched ones.
  EXPECT_LT(KoLeoLoss(torch::eye(5)).item<double>(), KoLeoLoss(torch::ones({5, 5}) + 0.01 * torch::eye(5)).item<double>());
}

}  // namespace
}  // namespace scdino::model
