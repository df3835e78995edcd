// Mixed precision: the loss scaler's arithmetic, that scaling leaves the
// step exact, that an overflow skips the optimizer and backs off, that the
// scale survives a checkpoint, and that bf16 autocast runs forward in bf16
// while parameters and gradients stay fp32 (on the CPU, which has bf16
// autocast; training runs on the CPU stay fp32, see run::RunConfig::precision).
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/torch_compat.h"
#include "model/dino.h"
#include "model/precision.h"
#include "support/tiny_model.h"

namespace scdino::model {
namespace {

DinoOptions Tiny() {
  DinoOptions o = scdino::testing::TinyDino();
  o.epochs = 2;
  o.freeze_last_layer = 0;
  return o;
}

StepInput Crops(int64_t seed) {
  torch::manual_seed(seed);
  StepInput in;
  for (int i = 0; i < 2; ++i) in.crops.push_back(torch::randn({4, 2, 16, 16}));
  for (int i = 0; i < 2; ++i) in.crops.push_back(torch::randn({4, 2, 8, 8}));
  in.lr = 1e-3;
  in.weight_decay = 0.04;
  in.momentum = 0.99;
  return in;
}

void ExpectSameState(const Dino& a, const Dino& b) {
  const auto sa = a.StateDict();
  const auto sb = b.StateDict();
  for (const auto& [name, t] : sa) {
    if (name.rfind("loss_scaler.", 0) == 0) continue;
    ASSERT_TRUE(sb.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, sb.at(name))) << name;
  }
}

TEST(Precision, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(*ParsePrecision("bf16"), Precision::kBf16);
  EXPECT_EQ(*ParsePrecision("fp16"), Precision::kFp16);
  EXPECT_EQ(*ParsePrecision("fp32"), Precision::kFp32);
  auto bad = ParsePrecision("float16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'float16'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("fp32, bf16 or fp16"), std::string::npos);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  s.Update(torch::tensor(true));
  EXPECT_EQ(s.scale(), 512);
  s.Update(torch::tensor(false));
  s.Update(torch::tensor(false));
  EXPECT_EQ(s.scale(), 512);
  s.Update(torch::tensor(false));
  EXPECT_EQ(s.scale(), 1024);
  s.Update(torch::tensor(false));
  s.Update(torch::tensor(true));  // an overflow restarts the count
  s.Update(torch::tensor(false));
  s.Update(torch::tensor(false));
  EXPECT_EQ(s.scale(), 512);
}

// Scaling by a power of two commutes with every rounding in backward (all of
// backward is linear in the incoming gradient), so the scaled step is the
// unscaled step bit for bit.
TEST(LossScaler, ScaledStepsEqualUnscaledStepsExactly) {
  auto plain_opts = Tiny();
  auto scaled_opts = Tiny();
  scaled_opts.loss_scaling = true;
  torch::manual_seed(1);
  Dino plain(plain_opts);
  torch::manual_seed(1);
  Dino scaled(scaled_opts);
  for (int64_t it = 0; it < 3; ++it) {
    auto in = Crops(10 + it);
    torch::manual_seed(it);
    auto a = plain.Step(in);
    torch::manual_seed(it);
    auto b = scaled.Step(in);
    ASSERT_FALSE(scaled.Values(b).overflow);
    EXPECT_EQ(a.loss.item<float>(), b.loss.item<float>());
  }
  ExpectSameState(plain, scaled);
  EXPECT_EQ(scaled.scaler->scale(), 65536.0);
}

TEST(LossScaler, OverflowSkipsTheOptimizerStepAndHalvesTheScale) {
  auto opts = Tiny();
  opts.loss_scaling = true;
  opts.loss_scaler.init_scale = 1e38;  // scaled gradients overflow fp32
  torch::manual_seed(2);
  Dino dino(opts);
  TensorMap before;  // StateDict() aliases the live tensors
  for (const auto& [name, t] : dino.StateDict()) before[name] = t.clone();
  const auto out = dino.Values(dino.Step(Crops(3)));
  EXPECT_TRUE(out.finite);
  EXPECT_TRUE(out.overflow);
  EXPECT_EQ(dino.scaler->scale(), 5e37);
  const auto after = dino.StateDict();
  for (const auto& [name, t] : before) {
    if (name.rfind("student.", 0) == 0 || name.rfind("optimizer.", 0) == 0) {
      EXPECT_TRUE(torch::equal(t, after.at(name))) << name << " changed in a skipped step";
    }
  }
  // As the reference, the center still moves.
  EXPECT_FALSE(torch::equal(before.at("dino_loss.center"), after.at("dino_loss.center")));
}

TEST(LossScaler, ScaleIsCheckpointedAndMayBeAbsent) {
  auto opts = Tiny();
  opts.loss_scaling = true;
  opts.loss_scaler.init_scale = 1e38;
  Dino a(opts);
  a.Step(Crops(4));
  auto state = a.StateDict();
  ASSERT_TRUE(state.count("loss_scaler.scale"));
  opts.loss_scaler.init_scale = 4.0;
  Dino b(opts);
  ASSERT_TRUE(b.LoadStateDict(state, "ckpt").ok());
  EXPECT_EQ(b.scaler->scale(), 5e37);
  // A checkpoint from a run without loss scaling keeps the initial scale.
  Dino c(opts);
  state.erase("loss_scaler.scale");
  state.erase("loss_scaler.growth_tracker");
  ASSERT_TRUE(c.LoadStateDict(state, "ckpt").ok());
  EXPECT_EQ(c.scaler->scale(), 4.0);
  // Half of it is an error naming the key.
  state["loss_scaler.scale"] = torch::tensor(2.0, torch::kFloat64);
  auto s = c.LoadStateDict(state, "ckpt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ckpt: 'loss_scaler.scale'"), std::string::npos) << s.message();
}

TEST(Autocast, GuardCastsMatmulsToBf16AndRestoresTheState) {
  auto a = torch::randn({8, 8});
  {
    AutocastGuard guard(torch::kCPU, Precision::kBf16);
    EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(compat::AutocastEnabled(torch::kCPU));
  EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kFloat);
  {
    AutocastGuard fp32(torch::kCPU, Precision::kFp32);
    EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kFloat);
  }
}

TEST(Autocast, Bf16StepKeepsFp32MasterWeightsAndTracksTheFp32Loss) {
  auto fp32_opts = Tiny();
  auto bf16_opts = Tiny();
  bf16_opts.precision = Precision::kBf16;
  torch::manual_seed(5);
  Dino full(fp32_opts);
  torch::manual_seed(5);
  Dino mixed(bf16_opts);
  for (int64_t it = 0; it < 3; ++it) {
    auto in = Crops(20 + it);
    torch::manual_seed(it);
    auto a = full.Step(in);
    torch::manual_seed(it);
    auto b = mixed.Step(in);
    EXPECT_EQ(b.student.head.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(b.loss.scalar_type(), torch::kFloat);
    // bf16 keeps 8 bits of mantissa: from the same weights the loss agrees to
    // about 1%. Later steps also carry the two runs' different updates (bf16
    // gradients), which move the loss by a few percent more depending on the
    // CPU's bf16 kernels (2.7% on an AMD EPYC), hence the looser bound.
    const double tolerance = it == 0 ? 0.02 : 0.06;
    EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), tolerance * a.loss.item<double>()) << "iteration " << it;
  }
  for (const auto& p : mixed.trainable()) {
    EXPECT_EQ(p.param.scalar_type(), torch::kFloat) << p.name;
    ASSERT_TRUE(p.param.grad().defined()) << p.name;
    EXPECT_EQ(p.param.grad().scalar_type(), torch::kFloat) << p.name;
  }
  EXPECT_EQ(mixed.loss->center.scalar_type(), torch::kFloat);
  EXPECT_FALSE(compat::AutocastEnabled(torch::kCPU));
}

}  // namespace
}  // namespace scdino::model
