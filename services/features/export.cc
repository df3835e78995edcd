#include "features/export.h"

#include <torch/serialize.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <string_view>

#include "common/files.h"
#include "features/backbone.h"
#include "model/vit.h"

namespace scdino::features {
namespace {

namespace fs = std::filesystem;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// DINO's constructor for this shape: one of its presets where the shape is
// one, else VisionTransformer with every argument.
std::string DinoArch(const model::VitOptions& o) {
  if (o.mlp_ratio() != 4.0 || !o.qkv_bias() || o.layer_norm_eps() != 1e-6) return "custom";
  for (const char* arch : {"vit_tiny", "vit_small", "vit_base"}) {
    const auto p = model::VitOptions::Preset(arch);
    if (p.embed_dim() == o.embed_dim() && p.depth() == o.depth() && p.num_heads() == o.num_heads()) return arch;
  }
  return "custom";
}

std::string PythonLines(const model::VitOptions& o, const std::string& arch, const std::string& out,
                        WeightsFormat format) {
  const std::string common = "patch_size=" + std::to_string(o.patch_size()) + ", in_chans=" +
                             std::to_string(o.in_chans()) + ", img_size=[" + std::to_string(o.img_size()) + "]";
  std::string lines = "import torch\nimport vision_transformer as vits  # DINO's or scDINO's vision_transformer.py\n";
  if (arch == "custom") {
    lines += "from functools import partial\n";
    lines += "model = vits.VisionTransformer(" + common + ", embed_dim=" + std::to_string(o.embed_dim()) +
             ", depth=" + std::to_string(o.depth()) + ", num_heads=" + std::to_string(o.num_heads()) +
             ", mlp_ratio=" + Number(o.mlp_ratio()) + ", qkv_bias=" + (o.qkv_bias() ? "True" : "False") +
             ", norm_layer=partial(torch.nn.LayerNorm, eps=" + Number(o.layer_norm_eps()) + "))\n";
  } else {
    lines += "model = vits." + arch + "(" + common + ")\n";
  }
  const std::string literal = nlohmann::json(out).dump();  // a valid Python string literal
  if (format == WeightsFormat::kPyTorch) {
    lines += "model.load_state_dict(torch.load(" + literal + ", map_location=\"cpu\"), strict=True)\n";
  } else {
    lines += "from safetensors.torch import load_file\n";
    lines += "model.load_state_dict(load_file(" + literal + "), strict=True)\n";
  }
  return lines;
}

// The channels the checkpoint's run selected: indices from its run shape,
// names from the config it was started with (when that still parses).
void AddChannels(const Metadata& meta, const std::string& checkpoint, const ExportOptions& o, Metadata& out) {
  if (meta.count("run")) {
    auto run = nlohmann::json::parse(meta.at("run"), nullptr, false);
    if (run.is_object() && run.contains("channels")) out["channel_indices"] = run["channels"].dump();
  }
  if (!meta.count("config") || !o.channels_of_config) return;
  auto channels = o.channels_of_config(meta.at("config"), checkpoint + " (its config)");
  if (!channels.ok()) return;
  nlohmann::json names = nlohmann::json::array(), indices = nlohmann::json::array();
  for (const auto& [index, name] : *channels) {
    indices.push_back(index);
    names.push_back(name);
  }
  out["channels"] = names.dump();
  if (!out.count("channel_indices")) out["channel_indices"] = indices.dump();
}

Status Refuse(const std::string& path, bool force) {
  std::error_code ec;
  if (fs::exists(path, ec) && !force) {
    return Status::AlreadyExists(path + " exists; scdino-export does not replace it without --force");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<WeightsFormat> WeightsFormatOf(const std::string& path) {
  if (EndsWith(path, ".pth") || EndsWith(path, ".pt")) return WeightsFormat::kPyTorch;
  if (EndsWith(path, ".safetensors")) return WeightsFormat::kSafetensors;
  return Status::InvalidArgument("--out " + path +
                                 ": expected a .pth or .pt file (PyTorch state dict) or a .safetensors file");
}

namespace {

// What rebuilds the model in PyTorch: DINO's vision_transformer arguments.
Metadata ModelMetadata(const model::VitOptions& o, const std::string& arch) {
  Metadata m;
  m["format"] = "scdino-backbone-1";
  m["scdino_version"] = SCDINO_VERSION;
  m["arch"] = arch;
  m["in_chans"] = std::to_string(o.in_chans());
  m["patch_size"] = std::to_string(o.patch_size());
  m["img_size"] = std::to_string(o.img_size());
  m["embed_dim"] = std::to_string(o.embed_dim());
  m["depth"] = std::to_string(o.depth());
  m["num_heads"] = std::to_string(o.num_heads());
  m["mlp_ratio"] = Number(o.mlp_ratio());
  m["qkv_bias"] = o.qkv_bias() ? "true" : "false";
  m["layer_norm_eps"] = Number(o.layer_norm_eps());
  return m;
}

// A state dict is a dict of tensors: torch.load gives exactly what
// load_state_dict(strict=True) takes. The metadata goes beside it, as JSON.
Status WritePth(const std::string& out, const std::string& metadata_path, const TensorMap& tensors,
                const Metadata& m) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& [name, t] : tensors) state.insert(name, t);
  const std::vector<char> bytes = torch::pickle_save(state);
  if (auto s = WriteFileAtomic(out, std::string_view(bytes.data(), bytes.size())); !s.ok()) return s;
  nlohmann::json side = nlohmann::json::object();
  for (const auto& [k, v] : m) {
    auto parsed = nlohmann::json::parse(v, nullptr, false);
    // Lists and shapes as JSON; numbers and words as they read.
    side[k] = (k == "classes" || k == "channels" || k == "channel_indices" || k == "model") && !parsed.is_discarded()
                  ? parsed
                  : nlohmann::json(v);
  }
  return WriteFileAtomic(metadata_path, side.dump(2) + "\n");
}

}  // namespace

StatusOr<ExportResult> ExportBackbone(const std::string& checkpoint, const std::string& out,
                                      const ExportOptions& options) {
  auto format = WeightsFormatOf(out);
  if (!format.ok()) return format.status();
  if (options.key != "teacher" && options.key != "student") {
    return Status::InvalidArgument("--key " + options.key + ": expected teacher or student");
  }
  ExportResult result;
  result.format = *format;
  result.out = out;
  if (*format == WeightsFormat::kPyTorch) result.metadata_path = out + ".json";
  const fs::path dir = fs::absolute(fs::path(out)).parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound("--out " + out + ": the directory " + dir.string() + " does not exist");
  }
  if (auto s = Refuse(out, options.force); !s.ok()) return s;
  if (!result.metadata_path.empty()) {
    if (auto s = Refuse(result.metadata_path, options.force); !s.ok()) return s;
  }

  auto backbone = LoadBackbone(checkpoint, options.key, torch::kCPU);
  if (!backbone.ok()) return backbone.status();
  auto header = ReadSafetensorsMetadata(checkpoint);
  if (!header.ok()) return header.status();
  const model::VitOptions& o = backbone->vit->options();

  TensorMap tensors;
  for (const auto& item : backbone->vit->named_parameters(/*recurse=*/true)) {
    tensors[item.key()] = item.value().detach().to(torch::kCPU).contiguous();
    result.parameters += item.value().numel();
  }
  for (const auto& item : backbone->vit->named_buffers(/*recurse=*/true)) {
    tensors[item.key()] = item.value().detach().to(torch::kCPU).contiguous();
  }
  result.tensors = static_cast<int64_t>(tensors.size());

  const std::string arch = DinoArch(o);
  result.python = PythonLines(o, arch, out, *format);
  Metadata& m = result.metadata;
  m = ModelMetadata(o, arch);
  m["model"] = backbone->model_json;
  m["checkpoint_key"] = options.key;
  m["source"] = fs::absolute(checkpoint).lexically_normal().string();
  if (backbone->iteration >= 0) m["iteration"] = std::to_string(backbone->iteration);
  if (backbone->epoch >= 0) m["epoch"] = std::to_string(backbone->epoch);
  if (!backbone->classes.empty()) m["classes"] = nlohmann::json(backbone->classes).dump();
  AddChannels(*header, checkpoint, options, m);
  m["load_with"] = result.python;

  if (*format == WeightsFormat::kSafetensors) {
    if (auto s = WriteSafetensors(out, tensors, m); !s.ok()) return s;
  } else if (auto s = WritePth(out, result.metadata_path, tensors, m); !s.ok()) {
    return s;
  }
  result.bytes = static_cast<int64_t>(fs::file_size(out, ec));
  return result;
}

}  // namespace scdino::features
