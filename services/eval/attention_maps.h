// Attention maps of a backbone, as DINO's visualize_attention.py draws them:
// the last block's CLS attention per head over a few images per class. The
// cost grows with the square of the tokens, (side / patch)^2: the side is
// bounded (AttentionSide) and a stop is honoured between blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "features/feature_set.h"

namespace scdino::eval {

/// Memory of one attention map's forward at `tokens` (patches + CLS): the
/// scores and the probabilities of one block, float32, `heads` of them.
int64_t AttentionBytes(int64_t tokens, int64_t heads);

/// The side the maps are drawn at and, when the request was capped, why.
struct AttentionSide {
  int64_t side = 0;     ///< 0: the features' own input, not resized
  std::string warning;  ///< non-empty: the request was over max_tokens
};

/// `requested` (downstream_analyses.attention_visualisation.image_size; 0:
/// the side the features were extracted at, `input_side`, 0 when they were
/// not resized) rounded down to a multiple of `patch`; a side whose patch
/// grid has more than `max_tokens` patches is lowered to the largest that
/// fits, with a warning that names the key, the tokens and the memory.
AttentionSide ChooseAttentionSide(int64_t requested, int64_t input_side, int64_t patch, int64_t heads,
                                  int64_t max_tokens);

struct AttentionMapOptions {
  int64_t per_class = 1;
  std::vector<std::string> channel_names;
  /// Images drawn at their own size (`prep.resize` 0) with more patches
  /// than this are drawn smaller, as ChooseAttentionSide says
  /// (scdino.evaluation.attention_max_tokens).
  int64_t max_tokens = 4096;
  /// Told once, when an image is drawn smaller than its own size.
  std::function<void(const std::string&)> warn;
  /// Asked between images and between blocks: true ends with Aborted.
  std::function<bool()> should_stop;
  /// Images drawn of those picked, after each.
  std::function<void(int64_t, int64_t)> on_progress;
};

/// Last-block CLS attention maps of `per_class` images of each class (the
/// first test images by path): attention/<class>_<n>.png under out_dir.
/// `prep` is the features' preprocessing with the attention side.
StatusOr<std::vector<std::string>> WriteAttentionMaps(const features::FeatureSet& set, features::Backbone& backbone,
                                                      const features::FeaturePrep& prep, const std::string& out_dir,
                                                      const AttentionMapOptions& options);

}  // namespace scdino::eval
