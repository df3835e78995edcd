// The fully connected layers built on the CPU products (linear.h) against
// LibTorch's own torch::linear: values and gradients, non-contiguous inputs,
// empty batches, and the fallback where the CPU path does not apply (the
// products themselves: cpu_gemm_test.cc).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/cpu_gemm.h"
#include "model/linear.h"
#include "support/test_support.h"

namespace scdino::model {
namespace {

using testing::ExpectCloseToScale;

TEST(Linear, EqualsTorchLinearInValuesAndGradients) {
  torch::manual_seed(6);
  for (auto sizes : std::vector<std::vector<int64_t>>{{4, 9, 24}, {7, 24}, {0, 24}}) {
    for (bool x_needs_grad : {true, false}) {
      auto w = torch::randn({40, 24}).requires_grad_(true);
      auto b = torch::randn({40}).requires_grad_(true);
      auto x = torch::randn(sizes).requires_grad_(x_needs_grad);
      ASSERT_EQ(CpuLinearApplies(x, w, b), HasCpuGemm());
      auto out_sizes = sizes;
      out_sizes.back() = 40;
      auto grad = torch::randn(out_sizes);
      auto fast = Linear(x, w, b);
      fast.backward(grad);
      auto fast_w = w.grad().clone(), fast_b = b.grad().clone();
      auto fast_x = x_needs_grad ? x.grad().clone() : torch::Tensor();
      w.mutable_grad() = torch::Tensor();
      b.mutable_grad() = torch::Tensor();
      if (x_needs_grad) x.mutable_grad() = torch::Tensor();
      auto plain = torch::linear(x, w, b);
      plain.backward(grad);
      const std::string what = "input " + c10::str(torch::IntArrayRef(sizes));
      ExpectCloseToScale(fast, plain, what + " output");
      ExpectCloseToScale(fast_w, w.grad(), what + " weight gradient");
      ExpectCloseToScale(fast_b, b.grad(), what + " bias gradient");
      if (x_needs_grad) ExpectCloseToScale(fast_x, x.grad(), what + " input gradient");
    }
  }
}

TEST(Linear, ModuleFormUsesTheLayersParametersOnAStridedInput) {
  torch::manual_seed(7);
  torch::nn::Linear layer(16, 8);
  auto x = torch::randn({5, 16, 3}).transpose(1, 2);  // [5, 3, 16], not contiguous
  ExpectCloseToScale(Linear(layer, x), layer(x), "strided input");
}

TEST(Linear, TakesTorchLinearWhereTheCpuPathDoesNotApply) {
  auto x = torch::randn({3, 6}, torch::kFloat64);
  auto w = torch::randn({4, 6}, torch::kFloat64), b = torch::randn({4}, torch::kFloat64);
  EXPECT_FALSE(CpuLinearApplies(x, w, b));
  EXPECT_TRUE(torch::allclose(Linear(x, w, b), torch::linear(x, w, b)));
  auto xf = torch::randn({3, 6}), wf = torch::randn({4, 6});
  EXPECT_FALSE(CpuLinearApplies(xf, wf, torch::Tensor()));
  EXPECT_TRUE(torch::allclose(Linear(xf, wf, torch::Tensor()), torch::linear(xf, wf)));
}

}  // namespace
}  // namespace scdino::model
