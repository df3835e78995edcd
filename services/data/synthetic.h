// Synthetic single cells: multi-channel images whose class shows in the
// cell's size and shape, its nucleus and its per-channel intensities, so a
// trained model's features separate classes better than a random model's.
// Used by tests, the benchmark and the README's example run.
// Seeded and pure: thread-safe, the same cells on every thread count.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace scdino::data {

struct SyntheticOptions {
  int64_t classes = 4;
  int64_t per_class = 64;
  int64_t channels = 5;
  int64_t size = 50;
  uint64_t seed = 0;
  /// 0: classes differ plainly (any features separate them). Towards 1 the
  /// class traits move closer together while each cell's position, size,
  /// orientation and noise vary more: nuisances a random network's features
  /// follow and DINO's augmentations teach a model to ignore.
  double difficulty = 0.0;
};

struct SyntheticSet {
  torch::Tensor images;  ///< [N, C, S, S] float32 in [0, 1], class-major
  torch::Tensor labels;  ///< [N] int64
  std::vector<std::string> class_names;  ///< "class_0", ... (sorted order = index)
};

/// Image `index` (within its class) of class `cls`: [C, S, S] in [0, 1].
/// Deterministic in (seed, cls, index).
torch::Tensor SyntheticCell(const SyntheticOptions& o, int64_t cls, int64_t index);

SyntheticSet MakeSyntheticSet(const SyntheticOptions& o);

}  // namespace scdino::data
