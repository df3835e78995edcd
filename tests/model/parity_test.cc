// Acceptance test of the model and training step: two DINO iterations
// computed by the reference implementation (../shared/reference/dino-parity),
// replayed here from the same weights and crops. The whole configuration is
// read from the fixture's config.json, so a fixture of another shape,
// channel count, crop count or option set is checked the same way.
//
// Tolerances (float32 on CPU; the reference ran PyTorch 1.13 on CPU too):
// - forward values (CLS, head outputs, attention, loss, center): rtol 1e-4,
//   atol 1e-5 x the tensor's largest magnitude. Same operations in the same
//   order; differences come only from BLAS blocking and reduction order
//   (float32 epsilon ~1.2e-7, accumulated over a few hundred terms).
// - gradients: rtol 1e-3, atol 1e-4 x the gradient's largest magnitude. The
//   loss divides by temperatures of 0.1 and 0.04, which amplifies forward
//   rounding ~25x before backward reduces it over the batch.
// - updates (after minus before) of student and teacher weights: 1e-3 x the
//   largest update of that tensor, plus what the gradient tolerance allows
//   through Adam: an error d in a gradient element moves its update by
//   |du/dg| d, and Adam's sensitivity |du/dg| grows as the gradient shrinks
//   towards eps (it divides each element by its own size; on a first step
//   u = lr g / (|g| + eps), so du/dg = lr eps / (|g| + eps)^2). A fixed
//   relative threshold fails for elements whose gradient is near zero (1e-7
//   of the tensor's largest) although their gradients agree; the derived one
//   stays tight where Adam is insensitive, for a fixture of any shape and
//   option set (AdamUpdateTolerance). From the second step on, the moments
//   carry the earlier gradients' errors too: an element whose first gradient
//   was tiny (|g| ~ 1e-7 of the tensor's largest) has a relatively wrong v
//   that the next update divides by. Without that term, oneDNN's float32
//   step missed the reference's second-step updates of 6 elements (qkv,
//   proj and fc2 weights) by 0.8-4 % on the other shape, while the float64
//   step matched everywhere: rounding, not a bug. An AdamW update is about lr in size,
//   far below the weights themselves, so only a comparison of updates shows
//   that the optimiser, clipping, freeze and EMA are right. Measured with
//   the reference algorithm alone (make_parity_fixture.py, float32 against
//   float64 from the same values, 12 seeds of the other shape): float32
//   rounding moves a step's updates by up to 0.1 % of the tensor's largest
//   update, always at elements whose second moment is tiny (sqrt(v) 1e-2 to
//   1e-4 of the tensor's median); the derived tolerance covers them with
//   4x margin (worst |difference| / tolerance 0.23). The key part of
//   qkv.bias has a gradient that is zero but for rounding (softmax ignores a
//   shift shared by all keys), so its updates are noise: the derived
//   tolerance there is large, as it should be. The teacher's updates also
//   get one float32 ulp of the weight (its EMA rounds).
// - schedules: 1e-12 relative (float64 on both sides).
// Nothing here is bit for bit: scdino's float32 products (oneDNN, cpu_gemm.h)
// sum in another order than the reference's OpenBLAS ones. Whether a
// difference is rounding or a bug is settled in float64: the fixture of
// another shape (tests/model/make_parity_fixture.py: 3 channels, patch 4,
// depth 3, trained weight_g, no clipping, teacher-temperature warm-up) is
// generated in float64 and float32, and the float64 step must match it
// within 1e-6 of the float32 tolerances (OtherShapeInFloat64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "common/torch_compat.h"
#include "model/dino.h"
#include "common/op_count.h"
#include "model/schedules.h"
#include "support/test_support.h"

namespace scdino::model {
namespace {

using nlohmann::json;
using scdino::testing::AllClose;

std::string SharedFixture() {
  if (const char* d = std::getenv("SCDINO_PARITY_DIR")) return d;
  return scdino::testing::SharedDir() + "/reference/dino-parity";
}

json ReadConfig(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  EXPECT_TRUE(in.good()) << "cannot read " << dir << "/config.json";
  return json::parse(in);
}

SafetensorsFile Read(const std::string& dir, const std::string& name) {
  auto f = ReadSafetensors(dir + "/" + name);
  if (!f.ok()) throw std::runtime_error(f.status().ToString());
  return std::move(f).value();
}

DinoOptions OptionsFrom(const json& c) {
  DinoOptions o;
  o.vit.in_chans(c.at("in_chans")).patch_size(c.at("patch_size")).embed_dim(c.at("embed_dim"))
      .depth(c.at("depth")).num_heads(c.at("num_heads")).mlp_ratio(c.at("mlp_ratio"))
      .img_size(c.value("pos_embed_grid_size", c.at("global_size").get<int64_t>()))
      .qkv_bias(c.value("mlp_qkv_bias", true)).layer_norm_eps(c.value("layer_norm_eps", 1e-6))
      .drop_path_rate(c.value("drop_path_rate", 0.0));
  o.out_dim = c.at("out_dim");
  o.head_hidden_dim = c.at("head_hidden_dim");
  o.head_bottleneck_dim = c.at("head_bottleneck_dim");
  o.head_nlayers = c.at("head_nlayers");
  o.norm_last_layer = c.at("norm_last_layer");
  o.local_crops_number = c.at("local_crops_number");
  o.warmup_teacher_temp = c.at("warmup_teacher_temp");
  o.teacher_temp = c.at("teacher_temp");
  o.warmup_teacher_temp_epochs = c.at("warmup_teacher_temp_epochs");
  o.epochs = c.at("epochs");
  o.student_temp = c.at("student_temp");
  o.center_momentum = c.at("center_momentum");
  o.clip_grad = c.at("clip_grad");
  o.freeze_last_layer = c.at("freeze_last_layer");
  return o;
}

ScheduleOptions ScheduleOptionsFrom(const json& c) {
  ScheduleOptions s;
  s.lr = c.at("lr");
  s.min_lr = c.at("min_lr");
  s.warmup_epochs = c.at("warmup_epochs");
  s.weight_decay = c.at("weight_decay");
  s.weight_decay_end = c.at("weight_decay_end");
  s.momentum_teacher = c.at("momentum_teacher");
  s.epochs = c.at("epochs");
  s.niter_per_epoch = c.at("niter_per_epoch");
  s.global_batch = c.at("batch_size").get<int64_t>() * c.value("world_size", 1);
  return s;
}

torch::Tensor AsTensor(const std::vector<double>& v) { return torch::tensor(v, torch::kFloat64); }

// How far AdamW's state may be off, per element, from gradient errors of
// this and earlier steps (zero before the first).
struct AdamStateTolerance {
  torch::Tensor m, v;
};

// Per element: how far an AdamW update may move when the gradient it comes
// from is off by `grad_tol` and the moments it carries (`m0`, `v0`, after
// `steps` steps) are off by `state` (see the top of the file), linearised at
// the reference gradient `g` (after clipping); `state` becomes the moments'
// tolerance after this step. The moments' errors add up over steps: an
// element whose first gradient was tiny and off by rounding keeps a
// relatively wrong v, which the second step's update divides by.
torch::Tensor AdamUpdateTolerance(const torch::Tensor& g_in, const torch::Tensor& grad_tol, const torch::Tensor& m0,
                                  const torch::Tensor& v0, int64_t steps, double lr, const AdamWOptions& o,
                                  AdamStateTolerance& state) {
  auto g = g_in.to(torch::kFloat64);
  auto dg = grad_tol.to(torch::kFloat64);
  if (!state.m.defined()) state = {torch::zeros_like(g), torch::zeros_like(g)};
  const double t = static_cast<double>(steps + 1);
  const double bc1 = 1.0 - std::pow(o.beta1, t), bc2 = 1.0 - std::pow(o.beta2, t);
  auto m = m0.to(torch::kFloat64) * o.beta1 + g * (1.0 - o.beta1);
  auto v = v0.to(torch::kFloat64) * o.beta2 + g * g * (1.0 - o.beta2);
  state.m = state.m * o.beta1 + dg * (1.0 - o.beta1);
  state.v = state.v * o.beta2 + g.abs() * dg * (2.0 * (1.0 - o.beta2));
  // u = lr (m / bc1) / (sqrt(v / bc2) + eps)
  auto s = (v / bc2).sqrt();
  auto d = s + o.eps;
  auto du_dm = (lr / bc1) / d;
  auto du_dv = torch::where(s > 0, (lr / bc1) * m.abs() / (d * d) / (2.0 * bc2 * s.clamp_min(1e-300)),
                            torch::zeros_like(s));
  return du_dm * state.m + du_dv * state.v;
}

// |got - want| <= tol elementwise; reports the worst element.
::testing::AssertionResult WithinTolerance(const torch::Tensor& got, const torch::Tensor& want,
                                           const torch::Tensor& tol) {
  auto excess = (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs() - tol;
  const auto worst = excess.flatten().argmax().item<int64_t>();
  if (excess.flatten()[worst].item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << ": got " << got.flatten()[worst].item<double>()
                                       << ", expected " << want.flatten()[worst].item<double>() << ", tolerance "
                                       << tol.flatten()[worst].item<double>();
}

::testing::AssertionResult ScaledClose(const torch::Tensor& got, const torch::Tensor& want, double rtol,
                                       double rel_atol) {
  double scale = want.abs().max().item<double>();
  return AllClose(got, want, rtol, rel_atol * std::max(scale, 1e-12));
}

TEST(DinoParity, SchedulesMatchReference) {
  const json c = ReadConfig(SharedFixture());
  auto ref = Read(SharedFixture(), "schedules.safetensors");
  auto s = MakeSchedules(ScheduleOptionsFrom(c));
  EXPECT_TRUE(AllClose(AsTensor(s.lr), ref.tensors.at("lr"), 1e-12, 1e-15)) << "lr";
  EXPECT_TRUE(AllClose(AsTensor(s.weight_decay), ref.tensors.at("weight_decay"), 1e-12, 1e-15)) << "weight_decay";
  EXPECT_TRUE(AllClose(AsTensor(s.momentum), ref.tensors.at("momentum"), 1e-12, 1e-15)) << "momentum";
  auto temps = TeacherTempSchedule(c.at("warmup_teacher_temp"), c.at("teacher_temp"),
                                   c.at("warmup_teacher_temp_epochs"), c.at("epochs"));
  EXPECT_TRUE(AllClose(AsTensor(temps), ref.tensors.at("teacher_temp"), 1e-12, 1e-15)) << "teacher_temp";
  if (ref.tensors.count("long_lr")) {
    const json a = json::parse(ref.metadata.at("long_lr"));
    auto long_lr = CosineSchedule(a.at("base_value"), a.at("final_value"), a.at("epochs"), a.at("niter_per_ep"),
                                  a.at("warmup_epochs"));
    EXPECT_TRUE(AllClose(AsTensor(long_lr), ref.tensors.at("long_lr"), 1e-12, 1e-15)) << "long_lr";
  }
}

// The fixture's two steps replayed in `dtype`. `k` scales every tolerance
// above: 1 for float32; for float64 on both sides (the same algorithm, no
// float32 rounding anywhere) 1e-6 of them, ~1e3 float64 epsilons: what
// is left there is a bug, not rounding.
// On `device` (the CPU, or the GPU of scripts/gpu-first-contact.sh): the
// same tolerances, so a GPU step is held to what the CPU's is.
void ExpectStepsMatch(const std::string& dir, torch::Dtype dtype, double k,
                      torch::Device device = torch::kCPU) {
  torch::manual_seed(0);
  const json c = ReadConfig(dir);
  DinoOptions opts = OptionsFrom(c);
  opts.master_dtype = dtype;
  const auto sched = MakeSchedules(ScheduleOptionsFrom(c));
  Dino dino(opts, device);
  auto weights = Read(dir, "weights.safetensors");
  ASSERT_TRUE(dino.LoadWeights(weights.tensors, "weights.safetensors").ok());

  const int64_t niter = c.at("niter_per_epoch");
  std::map<std::string, AdamStateTolerance> state_tol;
  for (const auto& step : c.at("steps")) {
    const int64_t it = step.at("iteration");
    const int64_t epoch = step.at("epoch");
    ASSERT_EQ(epoch, it / niter);
    SCOPED_TRACE("iteration " + std::to_string(it));
    auto ref = Read(dir, "step" + std::to_string(it) + ".safetensors");
    const auto& T = ref.tensors;

    // The schedule values this iteration uses, against the step's metadata.
    EXPECT_NEAR(sched.lr[it], std::stod(ref.metadata.at("lr")), 1e-12);
    EXPECT_NEAR(sched.weight_decay[it], std::stod(ref.metadata.at("weight_decay")), 1e-12);
    EXPECT_NEAR(sched.momentum[it], std::stod(ref.metadata.at("momentum")), 1e-12);
    EXPECT_NEAR(dino.loss->teacher_temp_schedule()[epoch], std::stod(ref.metadata.at("teacher_temp")), 1e-12);

    StepInput in;
    for (int64_t i = 0; i < dino.ncrops(); ++i) {
      in.crops.push_back(T.at("input.crop" + std::to_string(i)).to(device, dtype));
    }
    ASSERT_EQ(T.count("input.crop" + std::to_string(dino.ncrops())), 0u) << "fixture has more crops than config";
    in.epoch = epoch;
    in.lr = sched.lr[it];
    in.weight_decay = sched.weight_decay[it];
    in.momentum = sched.momentum[it];

    EXPECT_TRUE(ScaledClose(dino.loss->center, T.at("center.before"), k * 1e-4, k * 1e-5)) << "center.before";
    TensorMap before = dino.StateDict();
    for (auto& [k, v] : before) v = v.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);

    StepOutput out = dino.Step(in);
    ASSERT_TRUE(dino.Values(out).finite);

    EXPECT_TRUE(ScaledClose(out.student.backbone, T.at("student.backbone_cls"), k * 1e-4, k * 1e-5)) << "backbone_cls";
    EXPECT_TRUE(ScaledClose(out.student.head, T.at("student.output"), k * 1e-4, k * 1e-5)) << "student.output";
    EXPECT_TRUE(ScaledClose(out.teacher.head, T.at("teacher.output"), k * 1e-4, k * 1e-5)) << "teacher.output";
    EXPECT_NEAR(out.loss.item<double>(), T.at("loss").item<double>(), k * 1e-5 * std::abs(T.at("loss").item<double>()));
    EXPECT_NEAR(out.loss.item<double>(), step.at("loss").get<double>(), 1e-5 * std::abs(step.at("loss").get<double>()));
    EXPECT_TRUE(ScaledClose(dino.loss->center, T.at("center.after"), k * 1e-4, k * 1e-5)) << "center.after";

    int grads = 0, updates = 0;
    for (const auto& p : dino.student->named_parameters()) {
      const std::string& name = p.key();
      auto g = T.find("grad." + name);
      if (g == T.end()) {
        EXPECT_FALSE(p.value().grad().defined()) << name << " has a gradient the reference cancelled or froze";
      } else {
        ASSERT_TRUE(p.value().grad().defined()) << name << " has no gradient";
        EXPECT_TRUE(ScaledClose(p.value().grad(), g->second, k * 1e-3, k * 1e-4)) << "grad." << name;
        ++grads;
      }
      // What the gradient tolerance allows the update to move (zero for a
      // parameter without gradient: frozen, or cancelled in epoch 0).
      torch::Tensor derived = torch::zeros(p.value().sizes(), torch::kFloat64);
      if (g != T.end()) {
        const auto& gr = g->second;
        double clip = 1.0;
        if (opts.clip_grad > 0) clip = std::min(1.0, opts.clip_grad / (gr.norm().item<double>() + 1e-6));
        auto grad_tol = (gr.abs() * (k * 1e-3) + k * 1e-4 * gr.abs().max()) * clip;
        auto state = [&](const std::string& k) {
          auto it = before.find("optimizer." + name + k);
          return it == before.end() ? torch::zeros_like(gr) : it->second;
        };
        const int64_t steps = before.count("optimizer." + name + ".step")
                                  ? before.at("optimizer." + name + ".step").item<int64_t>()
                                  : 0;
        derived = AdamUpdateTolerance(gr * clip, grad_tol, state(".exp_avg"), state(".exp_avg_sq"), steps, in.lr,
                                      opts.adamw, state_tol[name]);
      }
      for (const std::string net : {"student", "teacher"}) {
        const auto& want_after = T.at(net + "_after." + name);
        const auto& was = before.at(net + "." + name);
        torch::Tensor now =
            (net == "student" ? p.value() : dino.teacher->named_parameters()[name]).detach().to(torch::kCPU);
        auto want_update = want_after - was;
        auto got_update = now.detach() - was;
        const double scale = want_update.abs().max().item<double>();
        // The teacher moves by (1 - momentum) of the student's update, ~3e-6,
        // and the EMA rounds its weights to float32: one ulp of the weight
        // (2^-23 |w|, ~6e-8 near 1) is allowed on top.
        auto tol = (net == "student" ? derived : derived * (1.0 - in.momentum) + k * 1.2e-7 * was.abs()) +
                   k * (1e-3 * scale + 1e-9);
        EXPECT_TRUE(WithinTolerance(got_update, want_update, tol)) << net << " update of " << name;
        EXPECT_TRUE(WithinTolerance(now.detach(), want_after, tol + k * 1e-6)) << net << "_after." << name;
        ++updates;
      }
    }
    EXPECT_GT(grads, 0);
    EXPECT_EQ(updates, 2 * static_cast<int>(dino.student->named_parameters().size()));

    torch::NoGradGuard no_grad;
    auto attn = dino.teacher->backbone->last_self_attention(in.crops[0]);
    EXPECT_TRUE(ScaledClose(attn, T.at("teacher.last_selfattention.crop0"), k * 1e-4, k * 1e-5)) << "attention";
  }
}

TEST(DinoParity, TwoTrainingStepsMatchReference) { ExpectStepsMatch(SharedFixture(), torch::kFloat32, 1.0); }

// The same two steps on the device under test (scdino::testing::TestDevice:
// the CPU here, the GPU in scripts/gpu-first-contact.sh), within the same
// tolerances; the AdamW path the device takes is named (the fused kernel on
// a GPU with LibTorch 2.1 or later).
TEST(DinoParity, TwoTrainingStepsMatchReferenceOnTheDeviceUnderTest) {
  const torch::Device device = scdino::testing::TestDevice();
  ExpectStepsMatch(SharedFixture(), torch::kFloat32, 1.0, device);
  Dino probe(OptionsFrom(ReadConfig(SharedFixture())), device);
  const std::string path = probe.optimizer->implementation();
  std::cout << "device " << device << ": AdamW path " << path << std::endl;
  RecordProperty("adamw_path", path);
  if (device.is_cuda() && compat::kHaveFusedAdamW) {
    EXPECT_EQ(path, "fused");
  }
}

// A bf16 step's loss from the fixture's weights and crops is within 2% of
// the float32 step's, on the device under test (bf16 keeps 8 bits of
// mantissa; DINO's reference runs its forward in autocast).
TEST(DinoParity, Bf16StepLossWithinTwoPercentOfFloat32OnTheDeviceUnderTest) {
  const torch::Device device = scdino::testing::TestDevice();
  const std::string dir = SharedFixture();
  const json c = ReadConfig(dir);
  const auto sched = MakeSchedules(ScheduleOptionsFrom(c));
  const auto weights = Read(dir, "weights.safetensors");
  const int64_t it = c.at("steps")[0].at("iteration");
  const auto step = Read(dir, "step" + std::to_string(it) + ".safetensors");
  double loss[2] = {0, 0};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    DinoOptions opts = OptionsFrom(c);
    if (bf16) opts.precision = Precision::kBf16;
    torch::manual_seed(0);
    Dino dino(opts, device);
    ASSERT_TRUE(dino.LoadWeights(weights.tensors, "weights.safetensors").ok());
    StepInput in;
    for (int64_t i = 0; i < dino.ncrops(); ++i) {
      in.crops.push_back(step.tensors.at("input.crop" + std::to_string(i)).to(device, torch::kFloat32));
    }
    in.epoch = c.at("steps")[0].at("epoch");
    in.lr = sched.lr[it];
    in.weight_decay = sched.weight_decay[it];
    in.momentum = sched.momentum[it];
    const auto v = dino.Values(dino.Step(in));
    ASSERT_TRUE(v.finite) << (bf16 ? "bf16" : "fp32");
    loss[bf16] = v.loss;
  }
  std::cout << "device " << device << ": fp32 loss " << loss[0] << ", bf16 loss " << loss[1] << std::endl;
  EXPECT_NEAR(loss[1], loss[0], 0.02 * std::abs(loss[0]));
}

// The patch embedding is one matrix product over the patches (no cuDNN on a
// GPU): on the fixture's weights and crops, the convolution DINO runs gives
// the same tokens and the same gradients of the weight, the bias and the
// pixels, in float32 and (to float64 rounding) in float64.
TEST(DinoParity, PatchEmbeddingEqualsTheConvolution) {
  const std::string dir = SharedFixture();
  const json c = ReadConfig(dir);
  const auto weights = Read(dir, "weights.safetensors").tensors;
  const auto step = Read(dir, "step" + std::to_string(c.at("steps")[0].at("iteration").get<int64_t>()) +
                                  ".safetensors")
                        .tensors;
  const auto& w0 = weights.at("backbone.patch_embed.proj.weight");
  const auto& b0 = weights.at("backbone.patch_embed.proj.bias");
  const int64_t p = w0.size(2);
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    SCOPED_TRACE(std::string(c10::toString(dtype)));
    PatchEmbed embed(w0.size(1), w0.size(0), p);
    embed->to(dtype);
    {
      torch::NoGradGuard guard;
      embed->proj->weight.copy_(w0);
      embed->proj->bias.copy_(b0);
    }
    for (const std::string crop : {"input.crop0", "input.crop2"}) {
      const auto x = step.at(crop).to(dtype).clone().requires_grad_(true);
      const auto xc = x.detach().clone().requires_grad_(true);
      const auto w = embed->proj->weight.detach().clone().requires_grad_(true);
      const auto b = embed->proj->bias.detach().clone().requires_grad_(true);
      OpCounter counter;
      const auto got = embed->forward(x);
      // No convolution: nothing a GPU image would need cuDNN for.
      EXPECT_EQ(counter.Take().by_name.count("aten::convolution"), 0u) << crop;
      const auto want = torch::conv2d(xc, w, b, {p, p}).flatten(2).transpose(1, 2);
      const double tol = dtype == torch::kFloat32 ? 1e-5 : 1e-12;
      EXPECT_TRUE(AllClose(got, want, tol, tol * want.abs().max().item<double>())) << crop << " tokens";
      const auto upstream = torch::randn_like(want);
      got.backward(upstream);
      want.backward(upstream);
      EXPECT_TRUE(AllClose(embed->proj->weight.grad(), w.grad(), 1e-4, tol * w.grad().abs().max().item<double>()))
          << crop << " weight gradient";
      EXPECT_TRUE(AllClose(embed->proj->bias.grad(), b.grad(), 1e-4, tol * b.grad().abs().max().item<double>()))
          << crop << " bias gradient";
      EXPECT_TRUE(AllClose(x.grad(), xc.grad(), 1e-4, tol * xc.grad().abs().max().item<double>()))
          << crop << " pixel gradient";
      embed->zero_grad();
    }
  }
}

// The fixture of the other shape, generated here from the reference
// algorithm (tests/model/make_parity_fixture.py, python3-torch) in `dtype`;
// "" (and a skip) where python3 cannot import torch (the GPU image).
std::string OtherShapeFixture(const scdino::testing::ScratchDir& dir, const std::string& dtype) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) return "";
  const std::string out = dir.file(dtype);
  const std::string cmd = std::string("/usr/bin/python3 ") + scdino::testing::SourceDir() +
                          "/tests/model/make_parity_fixture.py --config-preset other --dtype " + dtype + " --out " +
                          out + " > " + out + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

// Both sides in float64 through the same algorithm: any difference beyond
// float64 rounding is a bug, not float32 noise amplified by Adam.
TEST(DinoParity, OtherShapeInFloat64) {
  scdino::testing::ScratchDir dir;
  const std::string fixture = OtherShapeFixture(dir, "float64");
  if (fixture.empty()) GTEST_SKIP() << "python3 with torch (python3-torch) generates this fixture";
  ExpectStepsMatch(fixture, torch::kFloat64, 1e-6);
}

// The same in float32: scdino's products (oneDNN) against the reference's
// (OpenBLAS), within the derived tolerances.
TEST(DinoParity, OtherShapeInFloat32) {
  scdino::testing::ScratchDir dir;
  const std::string fixture = OtherShapeFixture(dir, "float32");
  if (fixture.empty()) GTEST_SKIP() << "python3 with torch (python3-torch) generates this fixture";
  ExpectStepsMatch(fixture, torch::kFloat32, 1.0);
}

}  // namespace
}  // namespace scdino::model
