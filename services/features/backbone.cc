#include "features/backbone.h"

#include <nlohmann/json.hpp>

#include <set>

#include "common/safetensors.h"
#include "model/dino.h"

namespace scdino::features {

StatusOr<model::VitOptions> VitOptionsFromJson(const std::string& model_json, const std::string& origin) {
  auto j = nlohmann::json::parse(model_json, nullptr, false);
  if (!j.is_object()) return Status::DataLoss(origin + ": metadata 'model' is not a JSON object: " + model_json);
  for (const char* k : {"in_chans", "patch_size", "img_size", "embed_dim", "depth", "num_heads"}) {
    if (!j.contains(k) || !j[k].is_number_integer()) {
      return Status::DataLoss(origin + ": metadata 'model' lacks the integer '" + k + "': " + model_json);
    }
  }
  model::VitOptions o;
  o.in_chans(j["in_chans"]).patch_size(j["patch_size"]).img_size(j["img_size"]).embed_dim(j["embed_dim"])
      .depth(j["depth"]).num_heads(j["num_heads"]);
  o.mlp_ratio(j.value("mlp_ratio", 4.0)).qkv_bias(j.value("qkv_bias", true))
      .layer_norm_eps(j.value("layer_norm_eps", 1e-6));
  return o;
}

std::string VitOptionsToJson(const model::VitOptions& o) {
  return nlohmann::json{{"in_chans", o.in_chans()},     {"patch_size", o.patch_size()},
                        {"img_size", o.img_size()},     {"embed_dim", o.embed_dim()},
                        {"depth", o.depth()},           {"num_heads", o.num_heads()},
                        {"mlp_ratio", o.mlp_ratio()},   {"qkv_bias", o.qkv_bias()},
                        {"layer_norm_eps", o.layer_norm_eps()}}
      .dump();
}

StatusOr<Backbone> LoadBackbone(const std::string& path, const std::string& key, torch::Device device) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const auto& meta = file->metadata;
  if (!meta.count("model")) {
    return Status::DataLoss(path + ": no 'model' metadata; expected an scdino checkpoint or a weights file from "
                                   "scripts/convert-dino-checkpoint.py");
  }
  auto options = VitOptionsFromJson(meta.at("model"), path);
  if (!options.ok()) return options.status();
  const std::string prefix = key + ".backbone.";
  TensorMap weights;
  std::set<std::string> keys;
  for (const auto& [name, t] : file->tensors) {
    keys.insert(name.substr(0, name.find('.')));
    if (name.rfind(prefix, 0) == 0) weights[name.substr(prefix.size())] = t;
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
  b.model_json = VitOptionsToJson(*options);
  try {
    if (meta.count("iteration")) b.iteration = std::stoll(meta.at("iteration"));
    if (meta.count("epoch")) b.epoch = std::stoll(meta.at("epoch"));
  } catch (const std::exception&) {
    return Status::DataLoss(path + ": metadata 'iteration'/'epoch' is not a number");
  }
  if (meta.count("classes")) {
    auto c = nlohmann::json::parse(meta.at("classes"), nullptr, false);
    if (c.is_array()) b.classes = c.get<std::vector<std::string>>();
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
  b.model_json = VitOptionsToJson(o);
  return b;
}

}  // namespace scdino::features
