// Flat parameters (model/flat_params.h) and the optimiser over them
// (model/optim.h): the layout, the views, the gradients accumulated in
// place, and that AdamW, clipping and the EMA give what their
// per-parameter forms give, and change nothing on a step skipped on the
// device.
#include "model/flat_params.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "common/op_count.h"
#include "common/torch_compat.h"
#include "model/cpu_gemm.h"
#include "model/dino.h"
#include "model/optim.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace scdino::model {
namespace {

using scdino::testing::AllClose;

TEST(FlatParameters, EveryParameterIsAViewInReverseOrderTrainableFirst) {
  torch::manual_seed(0);
  Dino dino(scdino::testing::TinyDino());
  auto& flat = dino.student_flat();
  const auto& entries = flat.entries();
  ASSERT_EQ(entries.size(), dino.student->named_parameters().size());
  // Trainable first, each in reverse registration order; the frozen
  // weight_g last.
  EXPECT_EQ(entries.front().p.name, "head.last_layer.weight_v");
  EXPECT_EQ(entries.back().p.name, "head.last_layer.weight_g");
  EXPECT_FALSE(entries.back().trainable);
  EXPECT_EQ(flat.trainable().back().name, "backbone.cls_token");
  int64_t at = 0;
  for (const auto& e : entries) {
    EXPECT_EQ(e.offset, at) << e.p.name;
    EXPECT_EQ(e.p.param.data_ptr<float>(), flat.values().data_ptr<float>() + e.offset) << e.p.name;
    at += e.numel;
  }
  EXPECT_EQ(at, flat.numel());
  // The teacher has the same layout.
  auto tp = dino.teacher->named_parameters();
  for (const auto& e : entries) EXPECT_TRUE(tp[e.p.name].equal(e.p.param)) << e.p.name;
  // Writing a parameter writes the buffer.
  {
    torch::NoGradGuard guard;
    entries[0].p.param.fill_(7.0f);
  }
  EXPECT_TRUE(flat.values().narrow(0, 0, entries[0].numel).eq(7.0f).all().item<bool>());
}

TEST(FlatParameters, SegmentsHoldTheSameParameterOfEveryBlock) {
  Dino dino(scdino::testing::TinyDino());
  auto& flat = dino.student_flat();
  size_t members = 0;
  bool found_qkv = false;
  for (const auto& s : flat.segments()) {
    members += s.members.size();
    const auto view = flat.SegmentView(flat.trainable_values(), s);
    for (size_t i = 0; i < s.members.size(); ++i) {
      const auto& p = flat.entries()[s.members[i]].p;
      EXPECT_TRUE(view[static_cast<int64_t>(i)].equal(p.param.reshape({-1}))) << p.name;
      EXPECT_EQ(s.decay, DecaysWeight(p.name, p.param)) << p.name;
    }
    if (flat.entries()[s.members[0]].p.name.find("attn.qkv.weight") != std::string::npos) {
      found_qkv = true;
      EXPECT_EQ(s.members.size(), 2u) << "qkv.weight of both blocks in one segment";
    }
  }
  EXPECT_TRUE(found_qkv);
  EXPECT_EQ(members, flat.trainable().size());
  EXPECT_LT(flat.segments().size(), flat.trainable().size());
}

TEST(FlatParameters, BackwardAccumulatesIntoTheFlatGradients) {
  Dino dino(scdino::testing::TinyDino());
  auto& flat = dino.student_flat();
  flat.ZeroGrads();
  auto x = torch::randn({3, 2, 16, 16});
  dino.student->forward({x}).head.sum().backward();
  for (size_t i = 0; i < flat.trainable().size(); ++i) {
    const auto& e = flat.entries()[i];
    const auto& g = e.p.param.grad();
    ASSERT_TRUE(g.defined()) << e.p.name;
    EXPECT_EQ(g.data_ptr<float>(), flat.grads().data_ptr<float>() + e.offset) << e.p.name;
    EXPECT_TRUE(flat.GradInPlace(i));
  }
  EXPECT_GT(flat.grads().abs().sum().item<double>(), 0.0);
  // A gradient another owner replaced is copied in; a cancelled one is not in place.
  flat.trainable()[0].param.mutable_grad() = torch::full_like(flat.trainable()[0].param, 3.0);
  EXPECT_TRUE(flat.GradInPlace(0));
  EXPECT_TRUE(flat.grads().narrow(0, 0, flat.entries()[0].numel).eq(3.0f).all().item<bool>());
  flat.trainable()[0].param.mutable_grad() = torch::Tensor();
  EXPECT_FALSE(flat.GradInPlace(0));
  flat.ZeroGrads();
  EXPECT_EQ(flat.grads().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(flat.GradInPlace(0));
}

// DINO's clip_gradients, parameter by parameter, as the reference writes it.
void ReferenceClip(const std::vector<NamedParam>& params, double clip) {
  for (const auto& p : params) {
    auto g = p.param.grad();
    const double norm = g.norm(2).item<double>();
    const double coef = clip / (norm + 1e-6);
    if (coef < 1) g.mul_(coef);
  }
}

TEST(GradientClipper, EqualsDinosPerParameterClip) {
  Dino dino(scdino::testing::TinyDino());
  auto& flat = dino.student_flat();
  flat.ZeroGrads();
  {
    torch::NoGradGuard guard;
    flat.grads().copy_(torch::randn({flat.trainable_numel()}) * 3.0);
  }
  const auto before = flat.grads().clone();
  GradientClipper(&flat, 0.5).Clip();
  const auto clipped = flat.grads().clone();
  {
    torch::NoGradGuard guard;
    flat.grads().copy_(before);
  }
  ReferenceClip(flat.trainable(), 0.5);
  EXPECT_TRUE(AllClose(clipped, flat.grads(), 1e-6, 1e-7));
  // Each gradient's norm is at most the clip.
  for (const auto& p : flat.trainable()) EXPECT_LE(p.param.grad().norm().item<double>(), 0.5 + 1e-5) << p.name;
}

// AdamW's state and the parameters, by name.
TensorMap Snapshot(const FlatParameters& flat, const AdamW& adamw) {
  TensorMap state;
  adamw.save_state("optimizer.", state);
  for (auto& [name, t] : state) t = t.clone();
  for (const auto& e : flat.entries()) state[e.p.name] = e.p.param.detach().clone();
  return state;
}

// A checkpoint reads the step counts from the device once, not once per
// parameter (each read is a host synchronisation on a GPU).
TEST(AdamW, SavingTheStateReadsTheDeviceOnce) {
  Dino dino(scdino::testing::TinyDino());
  auto& flat = dino.student_flat();
  AdamW adamw(&flat);
  flat.ZeroGrads();
  {
    torch::NoGradGuard guard;
    flat.grads().copy_(torch::randn({flat.trainable_numel()}));
  }
  adamw.step(1e-3, 0.04);
  ASSERT_GT(flat.trainable().size(), 4u);
  scdino::OpCounter counter;
  TensorMap state;
  adamw.save_state("optimizer.", state);
  const auto counts = counter.Take();
  EXPECT_LE(counts.host_syncs, 1) << "of " << flat.trainable().size() << " parameters";
  EXPECT_EQ(state.at("optimizer." + flat.entries()[0].p.name + ".step").item<int64_t>(), 1);
}

// AdamW's tensor-op path (what a GPU runs without LibTorch's fused kernel)
// against its one-pass CPU kernel on the same gradients: the same updates
// and state; the last layer, frozen in the first step, keeps its count one
// behind; a step skipped on the device (apply false, a NaN gradient)
// changes nothing, on either path.
TEST(AdamW, TensorOpsEqualTheCpuKernelAndASkippedStepChangesNothing) {
  auto run = [](bool cpu_kernels) {
    ScopedCpuGemm kernels(cpu_kernels);
    torch::manual_seed(5);
    Dino dino(scdino::testing::TinyDino());
    auto& flat = dino.student_flat();
    AdamW adamw(&flat);
    std::vector<TensorMap> after;
    for (int step = 0; step < 4; ++step) {
      const bool apply = step != 2;
      flat.ZeroGrads();
      {
        torch::NoGradGuard guard;
        flat.grads().copy_(torch::randn({flat.trainable_numel()}));
        if (!apply) flat.grads()[3] = std::nanf("");
      }
      if (step == 0) CancelLastLayerGradients(flat.trainable(), 0, 1);
      adamw.step(1e-3, 0.04, torch::tensor(apply));
      after.push_back(Snapshot(flat, adamw));
    }
    return after;
  };
  const auto kernel = run(true), ops = run(false);
  for (size_t step = 0; step < kernel.size(); ++step) {
    ASSERT_EQ(kernel[step].size(), ops[step].size());
    for (const auto& [name, t] : kernel[step]) {
      EXPECT_TRUE(AllClose(ops[step].at(name).to(torch::kFloat64), t.to(torch::kFloat64), 1e-6, 1e-7))
          << "step " << step << " " << name;
    }
  }
  for (const auto& states : {kernel, ops}) {
    // The skipped step (2) left everything as step 1 left it.
    for (const auto& [name, t] : states[1]) EXPECT_TRUE(t.equal(states[2].at(name))) << name;
    EXPECT_EQ(states[3].at("optimizer.head.last_layer.weight_v.step").item<int64_t>(), 2);
    EXPECT_EQ(states[3].at("optimizer.backbone.cls_token.step").item<int64_t>(), 3);
    for (const auto& [name, t] : states[3]) EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << name;
  }
}

// LibTorch's fused AdamW (the CUDA path, on the CPU from 2.4) gives ours.
TEST(AdamW, TheFusedKernelEqualsTheTensorOps) {
  if (!compat::kHaveFusedAdamWOnCpu) {
    GTEST_SKIP() << "LibTorch " << compat::TorchVersion() << " has no fused AdamW on the CPU (2.4+; the GPU image's "
                 << "unit tests run it)";
  }
  torch::manual_seed(9);
  const auto p0 = torch::randn({1000}), g = torch::randn({1000});
  auto p = p0.clone(), m = torch::zeros({1000}), v = torch::zeros({1000});
  auto q = p0.clone(), m2 = torch::zeros({1000}), v2 = torch::zeros({1000});
  auto step = torch::zeros({}, torch::kFloat32);
  for (int i = 0; i < 3; ++i) {
    step.add_(1.0);
    std::vector<torch::Tensor> ps{p}, gs{g}, ms{m}, vs{v}, steps{step};
    compat::FusedAdamW(ps, gs, ms, vs, steps, 1e-3, 0.9, 0.999, 1e-8, torch::zeros({}));
    const double s = i + 1.0;
    m2.mul_(0.9).add_(g, 0.1);
    v2.mul_(0.999).addcmul_(g, g, 0.001);
    auto denom = v2.sqrt().div_(std::sqrt(1 - std::pow(0.999, s))).add_(1e-8);
    q.addcdiv_(m2, denom, -1e-3 / (1 - std::pow(0.9, s)));
  }
  EXPECT_TRUE(AllClose(p, q, 1e-5, 1e-7));
  // found_inf skips the whole update.
  const auto before = p.clone();
  std::vector<torch::Tensor> ps{p}, gs{g}, ms{m}, vs{v}, steps{step};
  compat::FusedAdamW(ps, gs, ms, vs, steps, 1e-3, 0.9, 0.999, 1e-8, torch::ones({}));
  EXPECT_TRUE(p.equal(before));
}

// The EMA over both flat buffers is the reference's t * m + s * (1 - m) for
// every parameter, on both paths, and nothing where the step is skipped.
TEST(UpdateTeacher, IsTheReferencesEmaAndNothingWhereSkipped) {
  for (bool kernels : {true, false}) {
    ScopedCpuGemm on(kernels);
    torch::manual_seed(2);
    torch::nn::Sequential student(torch::nn::Linear(6, 5), torch::nn::Linear(5, 3));
    torch::nn::Sequential teacher(torch::nn::Linear(6, 5), torch::nn::Linear(5, 3));
    for (auto& p : teacher->parameters()) p.set_requires_grad(false);
    FlatParameters s(*student);
    FlatParameters t(*teacher, s);
    const auto t0 = t.values().clone();
    UpdateTeacher(s, t, 0.9, torch::tensor(false));
    EXPECT_TRUE(t.values().equal(t0)) << "kernels " << kernels;
    UpdateTeacher(s, t, 0.9, torch::tensor(true));
    auto tp = teacher->named_parameters();
    const auto expected = t0 * 0.9 + s.values() * (1.0 - 0.9);
    EXPECT_TRUE(AllClose(t.values(), expected, 1e-6, 1e-7)) << "kernels " << kernels;
    for (const auto& e : t.entries()) EXPECT_TRUE(tp[e.p.name].reshape({-1}).equal(t.values().narrow(0, e.offset, e.numel)));
  }
}

}  // namespace
}  // namespace scdino::model
