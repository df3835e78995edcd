#include "features/backbone.h"

#include <nlohmann/json.hpp>

#include <set>

#include "common/safetensors.h"
#include "model/dino.h"
#include "model/shape.h"

namespace scdino::features {

StatusOr<Backbone> LoadBackbone(const std::string& path, const std::string& key, torch::Device device) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const auto& meta = file->metadata;
  if (!meta.count("model")) {
    return Status::DataLoss(path + ": no 'model' metadata; expected an scdino checkpoint or a weights file from "
                                   "scripts/convert-dino-checkpoint.py");
  }
  auto options = model::VitOptionsFromShapeJson(meta.at("model"), path);
  if (!options.ok()) return options.status();
  const std::string prefix = key + ".backbone.";
  TensorMap weights;
  std::set<std::string> keys;
  for (const auto& [name, t] : file->tensors) {
    keys.insert(name.substr(0, name.find('.')));
    if (name.rfind(prefix, 0) == 0) weights[name.substr(prefix.size())] = t;
  }
  if (weights.empty() && meta.count("format") && meta.at("format") == "scdino-backbone-1") {
    // A backbone written by scdino-export: DINO's names, no prefix.
    const std::string held = meta.count("checkpoint_key") ? meta.at("checkpoint_key") : "teacher";
    if (held != key) {
      return Status::InvalidArgument(path + ": holds the " + held + " backbone (written by scdino-export), not the " +
                                     key + "; set downstream_analyses.compute_cls_features.checkpoint_key: " + held);
    }
    weights = file->tensors;
  }
  if (weights.empty()) {
    std::string held;
    for (const auto& k : keys) held += (held.empty() ? "" : ", ") + k;
    return Status::InvalidArgument(path + ": no '" + prefix + "*' tensors for checkpoint key '" + key +
                                   "'; the file holds: " + held);
  }
  Backbone b;
  b.vit = model::VisionTransformer(*options);
  if (auto s = model::LoadIntoModule(*b.vit, weights, "", path + " (" + key + " backbone)"); !s.ok()) return s;
  b.vit->to(device);
  b.vit->eval();
  b.source = path;
  b.key = key;
  b.model_json = model::VitShapeJson(*options);
  try {
    if (meta.count("iteration")) b.iteration = std::stoll(meta.at("iteration"));
    if (meta.count("epoch")) b.epoch = std::stoll(meta.at("epoch"));
  } catch (const std::exception&) {
    return Status::DataLoss(path + ": metadata 'iteration'/'epoch' is not a number");
  }
  if (meta.count("classes")) {
    auto c = nlohmann::json::parse(meta.at("classes"), nullptr, false);
    if (!c.is_array()) return Status::DataLoss(path + ": metadata 'classes' is not a list of class names");
    for (const auto& x : c) {
      if (!x.is_string()) return Status::DataLoss(path + ": metadata 'classes' holds " + x.dump() + ", not a class name");
      b.classes.push_back(x.get<std::string>());
    }
  }
  return b;
}

Backbone RandomBackbone(const model::VitOptions& o, uint64_t seed, torch::Device device) {
  torch::manual_seed(seed);
  Backbone b;
  b.vit = model::VisionTransformer(o);
  b.vit->to(device);
  b.vit->eval();
  b.source = "random_init";
  b.key = "random";
  b.model_json = model::VitShapeJson(o);
  return b;
}

int64_t PixelSide(int64_t channels, int64_t side) {
  int64_t s = side;
  while (s > 1 && channels * s * s > kPixelValues) --s;
  return s;
}

Backbone PixelBackbone(int64_t channels, int64_t side) {
  Backbone b;
  b.source = "raw_pixels";
  b.key = "raw_pixels";
  const nlohmann::json shape = {{"in_chans", channels}, {"side", side}, {"kept_side", PixelSide(channels, side)}};
  b.model_json = nlohmann::json{{"raw_pixels", shape}}.dump();
  return b;
}

torch::Tensor PixelFeatures(const torch::Tensor& images) {
  TORCH_CHECK(images.dim() == 4, "PixelFeatures takes [n, C, S, S] images");
  auto x = images.to(torch::kFloat32);
  const int64_t s = PixelSide(x.size(1), x.size(2));
  if (s != x.size(2) || s != x.size(3)) x = torch::adaptive_avg_pool2d(x, {s, s});
  return x.flatten(1).contiguous();
}

std::string PixelsPrepared(int64_t channels, int64_t side) {
  std::string s = std::to_string(side) + " px as the features, per-channel normalised";
  if (PixelSide(channels, side) != side) {
    s += ", area-averaged to " + std::to_string(PixelSide(channels, side)) + " px (at most " +
         std::to_string(kPixelValues) + " values)";
  }
  return s;
}

torch::Tensor Embed(const Backbone& b, const torch::Tensor& batch) {
  if (!b.vit) return PixelFeatures(batch);
  return model::VisionTransformer(b.vit)->forward(batch);
}

}  // namespace scdino::features
