// The checkpoint files of a run directory, as the control API lists them and
// scdino-features --all-checkpoints takes them.
// Functions of the directory's contents; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scdino {

/// One checkpoint file.
struct CheckpointEntry {
  std::string path;  ///< absolute
  int64_t iteration = 0, epoch = 0, size_bytes = 0, modified_unix_ms = 0;
};

/// The checkpoints (checkpoint*.safetensors with an "iteration" in their
/// metadata) in a run directory, oldest first; none when it cannot be read.
std::vector<CheckpointEntry> ListCheckpointFiles(const std::string& run_dir);

}  // namespace scdino
