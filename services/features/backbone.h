// The ViT backbone whose CLS token becomes a cell's features: the teacher
// (scDINO's default) or the student of an scdino checkpoint, a weights file
// converted from a PyTorch DINO/scDINO .pth (scripts/convert-dino-checkpoint.py),
// or a seeded random initialisation (the baseline a trained model must beat).
// Loading is a function of its inputs; the backbone it returns is run by one thread at a time.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "model/vit.h"

namespace scdino::features {

struct Backbone {
  model::VisionTransformer vit{nullptr};  ///< in eval mode, on the requested device
  std::string source;       ///< the file, or "random_init"
  std::string key;          ///< teacher | student | random
  int64_t iteration = -1;   ///< of the checkpoint; -1 when unknown
  int64_t epoch = -1;
  std::string model_json;   ///< the ViT shape
  std::vector<std::string> classes;  ///< the training run's classes, when recorded
};

/// Reads "<key>.backbone.*" from an scdino checkpoint or converted weights
/// file, or the backbone of a .safetensors written by scdino-export
/// (features/export.h). Errors name the file and, for a wrong key, the keys
/// it holds.
StatusOr<Backbone> LoadBackbone(const std::string& path, const std::string& key, torch::Device device);

/// DINO's initialisation of `o`, seeded.
Backbone RandomBackbone(const model::VitOptions& o, uint64_t seed, torch::Device device);

}  // namespace scdino::features
