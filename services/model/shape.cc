#include "model/shape.h"

#include <nlohmann/json.hpp>

namespace scdino::model {

namespace {

nlohmann::json VitShape(const VitOptions& o) {
  return {{"in_chans", o.in_chans()},   {"patch_size", o.patch_size()}, {"img_size", o.img_size()},
          {"embed_dim", o.embed_dim()}, {"depth", o.depth()},           {"num_heads", o.num_heads()},
          {"mlp_ratio", o.mlp_ratio()}, {"qkv_bias", o.qkv_bias()},     {"layer_norm_eps", o.layer_norm_eps()}};
}

}  // namespace

std::string VitShapeJson(const VitOptions& o) { return VitShape(o).dump(); }

std::string ModelShapeJson(const DinoOptions& o) {
  nlohmann::json j = VitShape(o.vit);
  j["out_dim"] = o.out_dim;
  j["head_hidden_dim"] = o.head_hidden_dim;
  j["head_bottleneck_dim"] = o.head_bottleneck_dim;
  j["head_nlayers"] = o.head_nlayers;
  j["norm_last_layer"] = o.norm_last_layer;
  j["local_crops_number"] = o.local_crops_number;
  return j.dump();
}

StatusOr<VitOptions> VitOptionsFromShapeJson(const std::string& shape_json, const std::string& origin) {
  auto j = nlohmann::json::parse(shape_json, nullptr, false);
  if (!j.is_object()) return Status::DataLoss(origin + ": metadata 'model' is not a JSON object: " + shape_json);
  for (const char* k : {"in_chans", "patch_size", "img_size", "embed_dim", "depth", "num_heads"}) {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 1 || j[k].get<int64_t>() > 65536) {
      return Status::DataLoss(origin + ": metadata 'model' lacks a positive integer '" + k + "': " + shape_json);
    }
  }
  for (const char* k : {"mlp_ratio", "layer_norm_eps"}) {
    if (j.contains(k) && !j[k].is_number()) {
      return Status::DataLoss(origin + ": metadata 'model': '" + k + "' is not a number: " + shape_json);
    }
  }
  if (j.contains("qkv_bias") && !j["qkv_bias"].is_boolean()) {
    return Status::DataLoss(origin + ": metadata 'model': 'qkv_bias' is not true or false: " + shape_json);
  }
  VitOptions o;
  o.in_chans(j["in_chans"]).patch_size(j["patch_size"]).img_size(j["img_size"]).embed_dim(j["embed_dim"])
      .depth(j["depth"]).num_heads(j["num_heads"]);
  o.mlp_ratio(j.value("mlp_ratio", 4.0)).qkv_bias(j.value("qkv_bias", true))
      .layer_norm_eps(j.value("layer_norm_eps", 1e-6));
  return o;
}

}  // namespace scdino::model
