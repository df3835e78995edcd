// A model's shape as JSON: what checkpoints, converted weights and feature
// directories record so that a backbone can be rebuilt from a file alone and
// a resume can refuse a checkpoint of another model.
// Pure functions over values; thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "model/dino.h"
#include "model/vit.h"

namespace scdino::model {

/// The whole DINO model (ViT, head, crops) as JSON.
std::string ModelShapeJson(const DinoOptions& o);
/// Its ViT part alone: the shape of a backbone.
std::string VitShapeJson(const VitOptions& o);
/// The ViT of either of the above (or of a converted weights file);
/// DataLoss names `origin` and the missing key.
StatusOr<VitOptions> VitOptionsFromShapeJson(const std::string& shape_json, const std::string& origin);

}  // namespace scdino::model
