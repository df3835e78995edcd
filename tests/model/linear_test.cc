// The oneDNN products (cpu_gemm.h) and the fully connected layers built on
// them (linear.h) against LibTorch's own torch::mm and torch::linear:
// values and gradients, every transposition, non-contiguous inputs, empty
// batches, and the fallback where the CPU path does not apply.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/cpu_gemm.h"
#include "model/linear.h"

namespace scdino::model {
namespace {

void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (want.numel() == 0) return;
  const double err = (got - want).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * scale + 1e-7) << what << ": largest difference " << err << " of " << scale;
}

// Debian's LibTorch links libdnnl.so.2: without it the step silently falls
// back to the slower BLAS products.
TEST(CpuGemm, FindsOneDnnInThisLibTorch) {
  EXPECT_TRUE(HasCpuGemm()) << CpuGemmDescription();
  EXPECT_TRUE(HasPairGemm()) << CpuGemmDescription();
  EXPECT_NE(CpuGemmDescription().find("oneDNN sgemm"), std::string::npos) << CpuGemmDescription();
}

TEST(CpuGemm, MmEqualsTorchMmForEveryTransposition) {
  torch::manual_seed(5);
  const int64_t M = 37, N = 53, K = 300;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = ta ? torch::randn({K, M}) : torch::randn({M, K});
      auto b = tb ? torch::randn({N, K}) : torch::randn({K, N});
      ASSERT_TRUE(CpuGemmApplies(a, b));
      const std::string what = std::string("op(a)") + (ta ? "^T" : "") + " op(b)" + (tb ? "^T" : "");
      ExpectClose(Mm(a, ta, b, tb), torch::mm(ta ? a.t() : a, tb ? b.t() : b), what);
    }
  }
  // A non-contiguous operand (a column slice) and an empty inner size.
  auto wide = torch::randn({M, 2 * K});
  auto b = torch::randn({K, N});
  ExpectClose(Mm(wide.slice(1, 0, K), false, b, false), torch::mm(wide.slice(1, 0, K), b), "sliced a");
  EXPECT_TRUE(torch::equal(Mm(torch::randn({M, 0}), false, torch::randn({0, N}), false), torch::zeros({M, N})));
}

TEST(Linear, EqualsTorchLinearInValuesAndGradients) {
  torch::manual_seed(6);
  for (auto sizes : std::vector<std::vector<int64_t>>{{4, 9, 24}, {7, 24}, {0, 24}}) {
    for (bool x_needs_grad : {true, false}) {
      auto w = torch::randn({40, 24}).requires_grad_(true);
      auto b = torch::randn({40}).requires_grad_(true);
      auto x = torch::randn(sizes).requires_grad_(x_needs_grad);
      ASSERT_TRUE(CpuLinearApplies(x, w, b));
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
      ExpectClose(fast, plain, what + " output");
      ExpectClose(fast_w, w.grad(), what + " weight gradient");
      ExpectClose(fast_b, b.grad(), what + " bias gradient");
      if (x_needs_grad) ExpectClose(fast_x, x.grad(), what + " input gradient");
    }
  }
}

TEST(Linear, ModuleFormUsesTheLayersParametersOnAStridedInput) {
  torch::manual_seed(7);
  torch::nn::Linear layer(16, 8);
  auto x = torch::randn({5, 16, 3}).transpose(1, 2);  // [5, 3, 16], not contiguous
  ExpectClose(Linear(layer, x), layer(x), "strided input");
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
