#include <gtest/gtest.h>

#include "model/dino.h"
#include "model/vit.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace scdino::model {
namespace {

::testing::AssertionResult AllCloseRowsSumToOne(const torch::Tensor& a) {
  return scdino::testing::AllClose(a.sum(-1), torch::ones_like(a.sum(-1)), 0, 1e-5);
}

TEST(VitOptions, PresetsHaveReferenceShapes) {
  auto t = VitOptions::Preset("vit_tiny");
  auto s = VitOptions::Preset("vit_small");
  auto b = VitOptions::Preset("vit_base");
  EXPECT_EQ(t.embed_dim(), 192);
  EXPECT_EQ(t.num_heads(), 3);
  EXPECT_EQ(s.embed_dim(), 384);
  EXPECT_EQ(s.num_heads(), 6);
  EXPECT_EQ(b.embed_dim(), 768);
  EXPECT_EQ(b.num_heads(), 12);
  EXPECT_EQ(b.depth(), 12);
  EXPECT_THROW(VitOptions::Preset("vit_huge"), c10::Error);
}

TEST(VisionTransformer, AnyChannelCountAndPatchSize) {
  for (int64_t chans : {1, 3, 5, 12}) {
    for (int64_t patch : {4, 8}) {
      VisionTransformer vit(VitOptions().in_chans(chans).patch_size(patch).img_size(32).embed_dim(24).depth(2)
                                .num_heads(3));
      auto y = vit(torch::randn({2, chans, 32, 32}));
      EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 24}));
      // Local crops use the interpolated position embedding.
      auto z = vit(torch::randn({3, chans, 16, 16}));
      EXPECT_EQ(z.sizes(), (std::vector<int64_t>{3, 24}));
      auto a = vit->last_self_attention(torch::randn({1, chans, 16, 16}));
      const int64_t tokens = (16 / patch) * (16 / patch) + 1;
      EXPECT_EQ(a.sizes(), (std::vector<int64_t>{1, 3, tokens, tokens}));
      EXPECT_TRUE(AllCloseRowsSumToOne(a));
    }
  }
}

TEST(VisionTransformer, WrongInputIsNamed) {
  VisionTransformer vit(VitOptions().in_chans(5).patch_size(8).img_size(32).embed_dim(16).depth(1).num_heads(2));
  try {
    vit(torch::randn({1, 3, 32, 32}));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expects [B, 5, H, W]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vit(torch::randn({1, 5, 30, 30})), c10::Error);
}

TEST(VisionTransformer, PositionEmbeddingUnchangedAtGlobalSize) {
  VisionTransformer vit(VitOptions().in_chans(1).patch_size(8).img_size(32).embed_dim(8).depth(1).num_heads(2));
  auto pe = vit->named_parameters()["pos_embed"];
  EXPECT_TRUE(vit->interpolate_pos_encoding(16, 32, 32).equal(pe));
  auto small = vit->interpolate_pos_encoding(4, 16, 16);
  EXPECT_EQ(small.sizes(), (std::vector<int64_t>{1, 5, 8}));
  EXPECT_TRUE(small[0][0].equal(pe[0][0])) << "the CLS position is never interpolated";
}

TEST(VisionTransformer, StochasticDepthRisesLinearlyAndOnlyInTraining) {
  VisionTransformer vit(
      VitOptions().in_chans(1).patch_size(8).img_size(16).embed_dim(8).depth(5).num_heads(2).drop_path_rate(0.4));
  std::vector<double> rates;
  for (const auto& m : vit->modules(false)) {
    if (auto* b = m->as<BlockImpl>()) rates.push_back(b->drop_path);
  }
  ASSERT_EQ(rates.size(), 5u);
  EXPECT_DOUBLE_EQ(rates.front(), 0.0);
  EXPECT_NEAR(rates[2], 0.2, 1e-7);
  EXPECT_NEAR(rates.back(), 0.4, 1e-7);
  auto x = torch::randn({16, 1, 16, 16});
  vit->eval();
  EXPECT_TRUE(vit(x).equal(vit(x)));
  vit->train();
  torch::manual_seed(1);
  auto a = vit(x);
  torch::manual_seed(2);
  EXPECT_FALSE(a.equal(vit(x)));
}

// The block's fused residual (addcmul with a per-sample scale) against
// DINO's DropPath written out: x + branch.div(keep) * mask, the masks drawn
// in the same order; values and the input's gradient.
TEST(VisionTransformer, StochasticDepthBlockEqualsDinosDropPath) {
  VitOptions o = VitOptions().embed_dim(16).num_heads(2);
  Block block(o, 0.5);
  block->train();
  torch::manual_seed(8);
  auto x = torch::randn({12, 5, 16}).requires_grad_(true);
  auto grad = torch::randn({12, 5, 16});
  torch::manual_seed(9);
  auto got = block->forward(x);
  got.backward(grad);
  auto got_grad = x.grad().clone();
  x.mutable_grad() = torch::Tensor();

  torch::manual_seed(9);
  const double keep = 0.5;
  auto a = block->attn->forward(block->norm1(x));
  auto mask1 = (keep + torch::rand({12, 1, 1})).floor_();
  auto y = x + a.div(keep) * mask1;
  auto m = block->mlp->forward(block->norm2(y));
  auto mask2 = (keep + torch::rand({12, 1, 1})).floor_();
  auto want = y + m.div(keep) * mask2;
  want.backward(grad);
  EXPECT_TRUE(scdino::testing::AllClose(got, want, 1e-5, 1e-6));
  EXPECT_TRUE(scdino::testing::AllClose(got_grad, x.grad(), 1e-5, 1e-6));
  // Both outcomes occur with this seed: some branches dropped, some kept.
  const auto kept = mask1.sum().item<double>();
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 12);
}

TEST(DinoNetworks, ReferenceNamesAndFrozenWeightG) {
  Dino dino(scdino::testing::TinyDino());
  auto names = dino.student->named_parameters().keys();
  for (const char* want : {"backbone.cls_token", "backbone.pos_embed", "backbone.patch_embed.proj.weight",
                           "backbone.blocks.1.attn.qkv.bias", "backbone.blocks.0.mlp.fc2.weight",
                           "backbone.norm.bias", "head.mlp.0.weight", "head.mlp.2.bias", "head.mlp.4.weight",
                           "head.last_layer.weight_g", "head.last_layer.weight_v"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  auto g = dino.student->named_parameters()["head.last_layer.weight_g"];
  EXPECT_FALSE(g.requires_grad());
  EXPECT_TRUE(g.eq(1).all().item<bool>());
  // The teacher starts equal to the student and never takes gradients.
  for (const auto& p : dino.teacher->named_parameters()) {
    EXPECT_FALSE(p.value().requires_grad());
    EXPECT_TRUE(p.value().equal(dino.student->named_parameters()[p.key()])) << p.key();
  }
  // Biases and 1-D tensors are not weight-decayed; the frozen weight_g is in no group.
  auto groups = ParamGroups(*dino.student);
  for (const auto& p : groups[1]) EXPECT_TRUE(p.param.dim() == 1 || p.name.find(".bias") != std::string::npos);
  for (const auto& p : groups[0]) EXPECT_NE(p.name, "head.last_layer.weight_g");
  EXPECT_EQ(groups[0].size() + groups[1].size() + 1, dino.student->parameters().size());
}

TEST(DinoNetworks, LoadWeightsNamesMissingAndMisshapenTensors) {
  Dino dino(scdino::testing::TinyDino());
  auto w = dino.TeacherWeights();
  w.erase("backbone.norm.weight");
  auto s = dino.LoadWeights(w, "w.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'backbone.norm.weight' is missing"), std::string::npos) << s.message();
  w = dino.TeacherWeights();
  w["backbone.cls_token"] = torch::zeros({1, 1, 15});
  s = dino.LoadWeights(w, "w.safetensors");
  EXPECT_NE(s.message().find("backbone.cls_token"), std::string::npos) << s.message();
  w = dino.TeacherWeights();
  w["head.extra.weight"] = torch::zeros({1});
  s = dino.LoadWeights(w, "w.safetensors");
  EXPECT_NE(s.message().find("head.extra.weight"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace scdino::model
