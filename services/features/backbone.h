// The ViT backbone whose CLS token becomes a cell's features: the teacher
// (scDINO's default) or the student of an scdino checkpoint, a weights file
// converted from a PyTorch DINO/scDINO .pth (scripts/convert-dino-checkpoint.py),
// or a seeded random initialisation, or the raw pixels (the two baselines a
// trained model must beat: run/learning_verdict.h).
// Loading is a function of its inputs; the backbone it returns is run by one thread at a time.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "model/vit.h"

namespace scdino::features {

struct Backbone {
  /// In eval mode, on the requested device; null for the raw pixels.
  model::VisionTransformer vit{nullptr};
  std::string source;       ///< the file, "random_init" or "raw_pixels"
  std::string key;          ///< teacher | student | random | raw_pixels
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

/// The raw pixels as features: the prepared images themselves (resized and
/// normalised as for the model), area-averaged to at most kPixelValues
/// values each where they hold more, so that a kNN over them stays about as
/// cheap as over a ViT's features. `channels` and `side` are the prepared
/// images'; model_json says the side kept.
constexpr int64_t kPixelValues = 4096;
Backbone PixelBackbone(int64_t channels, int64_t side);
/// The side PixelFeatures keeps for images of `channels` x `side` x `side`.
int64_t PixelSide(int64_t channels, int64_t side);
/// [n, C, S, S] prepared images -> [n, C * s * s] float32 (s: PixelSide).
torch::Tensor PixelFeatures(const torch::Tensor& images);
/// How images of `channels` x `side` x `side` become the raw-pixel
/// baseline, for the logs: "24 px as the features, per-channel normalised"
/// and, where they are averaged down, ", area-averaged to 28 px".
std::string PixelsPrepared(int64_t channels, int64_t side);

/// The features of a prepared batch: the ViT's CLS token, or the pixels.
torch::Tensor Embed(const Backbone& b, const torch::Tensor& batch);

}  // namespace scdino::features
