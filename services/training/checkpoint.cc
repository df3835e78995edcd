#include "training/checkpoint.h"

#include <nlohmann/json.hpp>

#include "common/safetensors.h"

namespace scdino::training {

namespace {

nlohmann::json VitShape(const model::VitOptions& o) {
  return {{"in_chans", o.in_chans()},   {"patch_size", o.patch_size()}, {"img_size", o.img_size()},
          {"embed_dim", o.embed_dim()}, {"depth", o.depth()},           {"num_heads", o.num_heads()},
          {"mlp_ratio", o.mlp_ratio()}, {"qkv_bias", o.qkv_bias()},     {"layer_norm_eps", o.layer_norm_eps()}};
}

}  // namespace

std::string VitShapeJson(const model::VitOptions& o) { return VitShape(o).dump(); }

std::string ModelShapeJson(const model::DinoOptions& o) {
  nlohmann::json j = VitShape(o.vit);
  j["out_dim"] = o.out_dim;
  j["head_hidden_dim"] = o.head_hidden_dim;
  j["head_bottleneck_dim"] = o.head_bottleneck_dim;
  j["head_nlayers"] = o.head_nlayers;
  j["norm_last_layer"] = o.norm_last_layer;
  j["local_crops_number"] = o.local_crops_number;
  return j.dump();
}

StatusOr<model::VitOptions> VitOptionsFromShapeJson(const std::string& shape_json, const std::string& origin) {
  auto j = nlohmann::json::parse(shape_json, nullptr, false);
  if (!j.is_object()) return Status::DataLoss(origin + ": metadata 'model' is not a JSON object: " + shape_json);
  for (const char* k : {"in_chans", "patch_size", "img_size", "embed_dim", "depth", "num_heads"}) {
    if (!j.contains(k) || !j[k].is_number_integer()) {
      return Status::DataLoss(origin + ": metadata 'model' lacks the integer '" + k + "': " + shape_json);
    }
  }
  model::VitOptions o;
  o.in_chans(j["in_chans"]).patch_size(j["patch_size"]).img_size(j["img_size"]).embed_dim(j["embed_dim"])
      .depth(j["depth"]).num_heads(j["num_heads"]);
  o.mlp_ratio(j.value("mlp_ratio", 4.0)).qkv_bias(j.value("qkv_bias", true))
      .layer_norm_eps(j.value("layer_norm_eps", 1e-6));
  return o;
}

Status SaveCheckpoint(const std::string& path, const model::Dino& dino, const CheckpointInfo& info) {
  Metadata meta{{"format", "scdino-checkpoint-1"},
                {"scdino_version", SCDINO_VERSION},
                {"iteration", std::to_string(info.iteration)},
                {"epoch", std::to_string(info.epoch)},
                {"world_size", std::to_string(info.world_size)},
                {"model", ModelShapeJson(dino.options())},
                {"config", info.config_text},
                {"classes", nlohmann::json(info.classes).dump()}};
  return WriteSafetensors(path, dino.StateDict(), meta);
}

StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& path, model::Dino& dino) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const auto& m = file->metadata;
  for (const char* key : {"format", "iteration", "epoch", "model"}) {
    if (!m.count(key)) return Status::DataLoss(path + ": not an scdino checkpoint (metadata '" + key + "' is missing)");
  }
  CheckpointInfo info;
  try {
    info.iteration = std::stoll(m.at("iteration"));
    info.epoch = std::stoll(m.at("epoch"));
    info.world_size = m.count("world_size") ? std::stoll(m.at("world_size")) : 1;
  } catch (const std::exception&) {
    return Status::DataLoss(path + ": metadata 'iteration'/'epoch' is not a number");
  }
  info.model_json = m.at("model");
  info.config_text = m.count("config") ? m.at("config") : "";
  if (m.count("classes")) {
    auto c = nlohmann::json::parse(m.at("classes"), nullptr, false);
    if (c.is_array()) info.classes = c.get<std::vector<std::string>>();
  }
  const std::string ours = ModelShapeJson(dino.options());
  if (nlohmann::json::parse(info.model_json, nullptr, false) != nlohmann::json::parse(ours)) {
    return Status::FailedPrecondition(path + ": the checkpoint's model " + info.model_json +
                                      " differs from the configured model " + ours +
                                      "; use another output_dir/name_of_run or the matching config");
  }
  if (auto s = dino.LoadStateDict(file->tensors, path); !s.ok()) return s;
  return info;
}

}  // namespace scdino::training
