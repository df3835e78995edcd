// Weights out for PyTorch users (scdino-export): the teacher or student
// backbone of an scdino checkpoint under DINO's own state-dict names, as a
// `.pth` that DINO's and scDINO's vision_transformer.py load with
// `load_state_dict(..., strict=True)`, or as `.safetensors` with the same
// names. What the model needs to be rebuilt (arch, in_chans, patch_size,
// img_size, the channels and classes) is in the safetensors header, and for
// a `.pth` in a JSON file beside it (`FILE.pth.json`): a state dict holds
// tensors only. docs/eval.md ("Export for PyTorch") shows the Python side.
// Functions of their arguments; one thread writes a given path at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/safetensors.h"
#include "common/status.h"

namespace scdino::features {

enum class WeightsFormat { kPyTorch, kSafetensors };

/// By extension: .pth or .pt -> kPyTorch, .safetensors -> kSafetensors;
/// InvalidArgument naming the path and the extensions otherwise.
StatusOr<WeightsFormat> WeightsFormatOf(const std::string& path);

struct ExportOptions {
  /// The checkpoint's network: teacher (scDINO's choice for features) or student.
  std::string key = "teacher";
  /// Replace existing output files; without it they are refused.
  bool force = false;
  /// The channels (index, name) a checkpoint's recorded config selects:
  /// the config is read at the edge (scdino-export passes one over
  /// run::ParseRunConfig). Null, or an error: no channel names recorded.
  std::function<StatusOr<std::vector<std::pair<int64_t, std::string>>>(const std::string& config_text,
                                                                       const std::string& what)>
      channels_of_config;
};

struct ExportResult {
  WeightsFormat format = WeightsFormat::kPyTorch;
  std::string out;        ///< the weights file
  std::string metadata_path;  ///< FILE.pth.json for a .pth; empty for .safetensors
  int64_t tensors = 0, parameters = 0, bytes = 0;
  Metadata metadata;      ///< what was recorded (string values; lists as JSON)
  std::string python;     ///< the lines that load it with DINO's vision_transformer.py
};

/// Writes the `key` backbone of `checkpoint` (an scdino checkpoint or a
/// weights file of scripts/convert-dino-checkpoint.py) to `out`. Errors name
/// the file: a missing network (the keys the checkpoint holds), an existing
/// output without `force`, a missing output directory. Written atomically:
/// a failed export leaves no partial file and keeps what was there.
StatusOr<ExportResult> ExportBackbone(const std::string& checkpoint, const std::string& out,
                                      const ExportOptions& options = {});

}  // namespace scdino::features
