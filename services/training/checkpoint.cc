#include "training/checkpoint.h"

#include <nlohmann/json.hpp>

#include "common/safetensors.h"

namespace scdino::training {

std::string ModelShapeJson(const model::DinoOptions& o) {
  nlohmann::json j = {
      {"in_chans", o.vit.in_chans()},
      {"patch_size", o.vit.patch_size()},
      {"img_size", o.vit.img_size()},
      {"embed_dim", o.vit.embed_dim()},
      {"depth", o.vit.depth()},
      {"num_heads", o.vit.num_heads()},
      {"mlp_ratio", o.vit.mlp_ratio()},
      {"qkv_bias", o.vit.qkv_bias()},
      {"layer_norm_eps", o.vit.layer_norm_eps()},
      {"out_dim", o.out_dim},
      {"head_hidden_dim", o.head_hidden_dim},
      {"head_bottleneck_dim", o.head_bottleneck_dim},
      {"head_nlayers", o.head_nlayers},
      {"norm_last_layer", o.norm_last_layer},
      {"local_crops_number", o.local_crops_number},
  };
  return j.dump();
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
