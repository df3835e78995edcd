// The fast paths of the step against the plain tensor-op formulas they
// replace: the attention core (CpuAttention and FusedAttention vs
// TensorAttention) and the
// head's weight-normalised last layer (column scaling vs a normalised copy
// of the weight), values and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "model/attention_core.h"
#include "model/dino_head.h"
#include "support/test_support.h"

namespace scdino::model {
namespace {

using testing::ExpectCloseToScale;

using Attention = std::function<torch::Tensor(const torch::Tensor& qkv, int64_t heads, double scale)>;

// `fast` against the tensor ops on three shapes: outputs and qkv gradients.
void ExpectSameAsTheTensorOps(const Attention& fast, torch::ScalarType dtype) {
  for (auto [B, N, C, H] : std::vector<std::array<int64_t, 4>>{{3, 17, 24, 3}, {2, 5, 8, 1}, {4, 37, 64, 4}}) {
    auto qkv = torch::randn({B, N, 3 * C}, dtype).requires_grad_(true);
    auto grad = torch::randn({B, N, C}, dtype);
    const double scale = 1.0 / std::sqrt(static_cast<double>(C / H));
    auto out = fast(qkv, H, scale);
    out.backward(grad);
    auto fast_grad = qkv.grad().clone();
    qkv.mutable_grad() = torch::Tensor();
    auto plain = TensorAttention(qkv, H, scale);
    plain.backward(grad);
    ExpectCloseToScale(out, plain, "output");
    ExpectCloseToScale(fast_grad, qkv.grad(), "qkv gradient");
  }
}

TEST(AttentionCore, CpuAttentionEqualsTheTensorOpsInValuesAndGradients) {
  torch::manual_seed(3);
  if (!CpuAttentionApplies(torch::randn({2, 5, 24}))) GTEST_SKIP() << "no per-head products in this build";
  ExpectSameAsTheTensorOps(CpuAttention, torch::kFloat32);
}

// The same on two threads (the CI machine's cores; the suites run on one),
// where the per-(image, head) products run side by side.
// Without per-head products AttentionCore is the tensor ops themselves:
// skipped there, as nothing could differ.
TEST(AttentionCore, OnTwoThreadsEqualsTheTensorOps) {
  torch::manual_seed(4);
  if (!CpuAttentionApplies(torch::randn({2, 5, 24}))) GTEST_SKIP() << "no per-head products in this build";
  const int was = torch::get_num_threads();
  torch::set_num_threads(2);
  ExpectSameAsTheTensorOps(CpuAttention, torch::kFloat32);
  torch::set_num_threads(was);
}

// LibTorch 2.x's fused attention, which the GPU path takes, against the
// tensor ops on the CPU (the same kernels' math fallback): values and
// gradients, float32 and float64. Runs in the GPU image's unit tests
// (LibTorch 2.6); Debian 12's 1.13 has no fused attention.
TEST(AttentionCore, FusedAttentionEqualsTheTensorOpsInValuesAndGradients) {
  if (!FusedAttentionAvailable()) GTEST_SKIP() << "this LibTorch has no scaled_dot_product_attention (before 2.1)";
  torch::manual_seed(5);
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) ExpectSameAsTheTensorOps(FusedAttention, dtype);
}

// The names of the backward functions in `out`'s autograd graph.
std::multiset<std::string> BackwardNames(const torch::Tensor& out) {
  std::multiset<std::string> names;
  std::set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> pending{out.grad_fn().get()};
  while (!pending.empty()) {
    auto* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    names.insert(node->name());
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return names;
}

// q, k and v come out of qkv by one unbind, whose backward writes qkv's
// gradient in its own layout, not by three selects (attention_core.cc's
// SplitHeads says what those cost on a GPU).
TEST(AttentionCore, SplitsTheHeadsByOneUnbindNotThreeSelects) {
  auto qkv = torch::randn({2, 5, 24}, torch::kFloat64).requires_grad_(true);
  std::vector<std::pair<std::string, torch::Tensor>> outs{{"TensorAttention", TensorAttention(qkv, 2, 0.25)}};
  if (FusedAttentionAvailable()) outs.emplace_back("FusedAttention", FusedAttention(qkv, 2, 0.25));
  for (const auto& [what, out] : outs) {
    const auto names = BackwardNames(out);
    EXPECT_EQ(names.count("UnbindBackward0"), 1u) << what;
    for (const auto& n : names) EXPECT_EQ(n.find("SelectBackward"), std::string::npos) << what << ": " << n;
  }
}

TEST(AttentionCore, TakesTheTensorOpsWhereTheCpuPathDoesNotApply) {
  auto qkv = torch::randn({2, 5, 24}, torch::kFloat64);
  EXPECT_FALSE(CpuAttentionApplies(qkv));
  torch::Tensor probs;
  auto out = AttentionCore(qkv, 2, 0.25, &probs);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(probs.sizes(), (std::vector<int64_t>{2, 2, 5, 5}));
  EXPECT_TRUE(torch::allclose(probs.sum(-1), torch::ones({2, 2, 5}, torch::kFloat64)));
}

TEST(WeightNormLinear, ColumnScalingEqualsTheNormalisedWeightInValuesAndGradients) {
  torch::manual_seed(4);
  for (bool freeze_g : {true, false}) {
    WeightNormLinear layer(16, 40, freeze_g);
    {
      torch::NoGradGuard no_grad;
      layer->weight_g.uniform_(0.5, 2.0);
    }
    auto x = torch::randn({2, 3, 16}).requires_grad_(true);
    auto grad = torch::randn({2, 3, 40});
    auto y = layer(x);
    y.backward(grad);
    auto gx = x.grad().clone(), gv = layer->weight_v.grad().clone();
    torch::Tensor gg = freeze_g ? torch::Tensor() : layer->weight_g.grad().clone();
    x.mutable_grad() = torch::Tensor();
    layer->weight_v.mutable_grad() = torch::Tensor();
    if (!freeze_g) layer->weight_g.mutable_grad() = torch::Tensor();
    auto want = torch::linear(x, layer->weight_g * layer->weight_v / layer->weight_v.norm(2, 1, true));
    want.backward(grad);
    ExpectCloseToScale(y, want, "output");
    ExpectCloseToScale(gx, x.grad(), "input gradient");
    ExpectCloseToScale(gv, layer->weight_v.grad(), "weight_v gradient");
    if (!freeze_g) ExpectCloseToScale(gg, layer->weight_g.grad(), "weight_g gradient");
  }
}

}  // namespace
}  // namespace scdino::model
