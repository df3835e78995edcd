// Training checkpoints: one safetensors file holding student, teacher, DINO
// center and optimiser state under reference names, with JSON metadata
// (iteration, epoch, model shape, the config text). Written atomically, so an
// interrupted or failed write leaves the previous checkpoint intact.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/dino.h"

namespace scdino::training {

struct CheckpointInfo {
  int64_t iteration = 0;    ///< iterations completed (the next one to run)
  int64_t epoch = 0;        ///< epoch of the next iteration
  int64_t world_size = 1;
  std::string model_json;   ///< model shape, compared on resume
  std::string config_text;  ///< the YAML the run was started with
  std::vector<std::string> classes;  ///< class names of the data set, index = label
};

/// The model shape as JSON (architecture, channels, patch, head, crops).
std::string ModelShapeJson(const model::DinoOptions& o);
/// Its ViT part alone: the shape of a backbone (features, converted weights).
std::string VitShapeJson(const model::VitOptions& o);
/// The ViT of a model shape (either of the above, or a converted weights
/// file's); errors name `origin` and the missing key.
StatusOr<model::VitOptions> VitOptionsFromShapeJson(const std::string& shape_json, const std::string& origin);

Status SaveCheckpoint(const std::string& path, const model::Dino& dino, const CheckpointInfo& info);

/// Loads into `dino`; refuses a checkpoint whose model shape differs, naming
/// both shapes.
StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& path, model::Dino& dino);

}  // namespace scdino::training
