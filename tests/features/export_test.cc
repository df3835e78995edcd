#include "features/export.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "common/files.h"
#include "config/config.h"
#include "features/backbone.h"
#include "support/test_support.h"
#include "support/tiny_model.h"
#include "training/checkpoint.h"

namespace scdino::features {
namespace {

namespace fs = std::filesystem;
using scdino::testing::ScratchDir;

// A training checkpoint of a tiny DINO on the README's five channels, its
// student moved away from the teacher, with the README's config inside.
model::DinoOptions WithVit(const model::VitOptions* vit) {
  auto o = scdino::testing::TinyDino(5);
  if (vit) o.vit = *vit;
  return o;
}

struct Checkpoint {
  ScratchDir scratch;
  std::string path = scratch.file("checkpoint.safetensors");
  model::Dino dino;
  explicit Checkpoint(const model::VitOptions* vit = nullptr) : dino(WithVit(vit)) {
    torch::NoGradGuard g;
    for (auto& p : dino.student->parameters()) p.add_(0.5);
    training::CheckpointInfo info;
    info.iteration = 12;
    info.epoch = 3;
    info.run.channels = {0, 1, 2, 3, 4};
    info.config_text = *ReadFile(std::string(scdino::testing::SourceDir()) + "/configs/small-data.yaml");
    info.classes = {"B", "T"};
    EXPECT_TRUE(training::SaveCheckpoint(path, dino, info).ok());
  }
  // The network's CLS for a fixed batch.
  static torch::Tensor Cls(model::VisionTransformer vit) {
    torch::NoGradGuard g;
    torch::manual_seed(3);
    vit->eval();
    return vit->forward(torch::randn({2, 5, 16, 16}));
  }
};

// As scdino-export sets them: the checkpoint's config read at the edge.
ExportOptions Edge() {
  ExportOptions o;
  o.channels_of_config = run::NamedChannelsOf;
  return o;
}

ExportOptions Key(const std::string& key) {
  ExportOptions o = Edge();
  o.key = key;
  return o;
}

ExportOptions Forced() {
  ExportOptions o = Edge();
  o.force = true;
  return o;
}

// DINO's vision_transformer.py names for a ViT of `depth` blocks.
std::set<std::string> DinoNames(int depth) {
  std::set<std::string> names = {"cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias",
                                 "norm.weight", "norm.bias"};
  for (int b = 0; b < depth; ++b) {
    for (const char* p : {"norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"}) {
      for (const char* w : {".weight", ".bias"}) names.insert("blocks." + std::to_string(b) + "." + p + w);
    }
  }
  return names;
}

TEST(ExportBackbone, SafetensorsHoldTheTeacherUnderDinoNamesAndItsShape) {
  Checkpoint c;
  const std::string out = c.scratch.file("teacher.safetensors");
  auto r = ExportBackbone(c.path, out, Edge());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->metadata_path.empty());
  auto file = ReadSafetensors(out);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::set<std::string> names;
  for (const auto& [name, t] : file->tensors) names.insert(name);
  EXPECT_EQ(names, DinoNames(2));
  auto teacher = c.dino.TeacherWeights();
  for (const auto& [name, t] : file->tensors) {
    ASSERT_TRUE(teacher.count("backbone." + name)) << name;
    EXPECT_TRUE(torch::equal(t, teacher.at("backbone." + name))) << name;
  }
  const auto& m = file->metadata;
  EXPECT_EQ(m.at("arch"), "custom");  // width 16, depth 2: no DINO preset
  EXPECT_EQ(m.at("in_chans"), "5");
  EXPECT_EQ(m.at("patch_size"), "8");
  EXPECT_EQ(m.at("img_size"), "16");
  EXPECT_EQ(m.at("checkpoint_key"), "teacher");
  EXPECT_EQ(m.at("iteration"), "12");
  EXPECT_EQ(m.at("channels"), R"(["AF647","BF","DAPI","CD3","PE"])");
  EXPECT_EQ(m.at("channel_indices"), "[0,1,2,3,4]");
  EXPECT_EQ(m.at("classes"), R"(["B","T"])");
  EXPECT_NE(r->python.find("vits.VisionTransformer(patch_size=8, in_chans=5, img_size=[16], embed_dim=16, depth=2, "
                           "num_heads=2, mlp_ratio=4, qkv_bias=True, norm_layer=partial(torch.nn.LayerNorm, eps=1e-06))"),
            std::string::npos)
      << r->python;
  EXPECT_NE(r->python.find("load_file(\"" + out + "\"), strict=True"), std::string::npos) << r->python;

  // scdino reads its own export back as the same network.
  auto back = LoadBackbone(out, "teacher", torch::kCPU);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto direct = LoadBackbone(c.path, "teacher", torch::kCPU);
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(torch::equal(Checkpoint::Cls(back->vit), Checkpoint::Cls(direct->vit)));
  auto wrong = LoadBackbone(out, "student", torch::kCPU);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("holds the teacher backbone (written by scdino-export), not the student"),
            std::string::npos)
      << wrong.status().ToString();
}

TEST(ExportBackbone, PthIsAStateDictWithItsMetadataBeside) {
  Checkpoint c;
  const std::string out = c.scratch.file("student.pth");
  auto r = ExportBackbone(c.path, out, Key("student"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metadata_path, out + ".json");
  auto bytes = ReadFile(out);
  ASSERT_TRUE(bytes.ok());
  const std::vector<char> data(bytes->begin(), bytes->end());
  auto state = torch::pickle_load(data).toGenericDict();
  auto student = LoadBackbone(c.path, "student", torch::kCPU);
  ASSERT_TRUE(student.ok());
  std::set<std::string> names;
  for (const auto& item : state) {
    const std::string name = item.key().toStringRef();
    names.insert(name);
    const auto* p = student->vit->named_parameters().find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(torch::equal(item.value().toTensor(), *p)) << name;
  }
  EXPECT_EQ(names, DinoNames(2));
  auto side = nlohmann::json::parse(*ReadFile(r->metadata_path));
  EXPECT_EQ(side["checkpoint_key"], "student");
  EXPECT_EQ(side["in_chans"], "5");
  EXPECT_EQ(side["channels"], nlohmann::json({"AF647", "BF", "DAPI", "CD3", "PE"}));
  EXPECT_NE(r->python.find("torch.load(\"" + out + "\", map_location=\"cpu\"), strict=True"), std::string::npos);
}

TEST(ExportBackbone, ADinoPresetIsNamedAsDinoBuildsIt) {
  const auto vit = model::VitOptions::Preset("vit_tiny").in_chans(5).patch_size(8).img_size(48);
  Checkpoint c(&vit);
  auto r = ExportBackbone(c.path, c.scratch.file("tiny.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metadata.at("arch"), "vit_tiny");
  EXPECT_NE(r->python.find("model = vits.vit_tiny(patch_size=8, in_chans=5, img_size=[48])\n"), std::string::npos)
      << r->python;
  EXPECT_EQ(r->tensors, static_cast<int64_t>(DinoNames(12).size()));
}

TEST(ExportBackbone, AnExistingFileIsKeptWithoutForce) {
  Checkpoint c;
  for (const std::string name : {"old.pth", "old.safetensors"}) {
    const std::string out = c.scratch.file(name);
    ASSERT_TRUE(WriteFileAtomic(out, "earlier export").ok());
    auto r = ExportBackbone(c.path, out, Edge());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
    EXPECT_NE(r.status().message().find(out + " exists"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("--force"), std::string::npos);
    EXPECT_EQ(*ReadFile(out), "earlier export");
    auto forced = ExportBackbone(c.path, out, Forced());
    ASSERT_TRUE(forced.ok()) << forced.status().ToString();
    EXPECT_NE(*ReadFile(out), "earlier export");
  }
  // The metadata beside a .pth counts as output too.
  const std::string pth = c.scratch.file("side.pth");
  ASSERT_TRUE(WriteFileAtomic(pth + ".json", "{}").ok());
  auto r = ExportBackbone(c.path, pth, Edge());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(pth + ".json exists"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(fs::exists(pth));
}

TEST(ExportBackbone, ACheckpointWithoutTheNetworkNamesWhatItHolds) {
  ScratchDir s;
  auto vit = model::VitOptions().in_chans(1).patch_size(4).img_size(8).embed_dim(4).depth(1).num_heads(1);
  auto b = RandomBackbone(vit, 1, torch::kCPU);
  TensorMap tensors;
  for (const auto& item : b.vit->named_parameters()) tensors["student.backbone." + item.key()] = item.value();
  ASSERT_TRUE(WriteSafetensors(s.file("student_only.safetensors"), tensors, {{"model", b.model_json}}).ok());
  auto r = ExportBackbone(s.file("student_only.safetensors"), s.file("out.pth"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(s.file("student_only.safetensors") +
                                      ": no 'teacher.backbone.*' tensors for checkpoint key 'teacher'; the file "
                                      "holds: student"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(fs::exists(s.file("out.pth")));
  EXPECT_FALSE(fs::exists(s.file("out.pth.json")));
}

TEST(ExportBackbone, BadOutputsAreNamed) {
  Checkpoint c;
  auto ext = ExportBackbone(c.path, c.scratch.file("model.bin"));
  ASSERT_FALSE(ext.ok());
  EXPECT_NE(ext.status().message().find("model.bin: expected a .pth or .pt file"), std::string::npos)
      << ext.status().ToString();
  auto dir = ExportBackbone(c.path, c.scratch.file("missing/model.pth"));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("the directory " + c.scratch.file("missing") + " does not exist"),
            std::string::npos)
      << dir.status().ToString();
  auto key = ExportBackbone(c.path, c.scratch.file("m.pth"), Key("head"));
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("--key head: expected teacher or student"), std::string::npos);
  auto missing = ExportBackbone(c.scratch.file("nothing.safetensors"), c.scratch.file("m.pth"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(c.scratch.file("nothing.safetensors")), std::string::npos);
}

}  // namespace
}  // namespace scdino::features
