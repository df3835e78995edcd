// The part of the safetensors format that needs no tensors: the file's
// "__metadata__" (string to string) and the header's size limit. Kept apart
// from common/safetensors.h so that the run layer (checkpoint listings) and
// what links it (the control plane, scdinoctl) do not load LibTorch.
// Functions of their arguments; thread-safe on distinct files.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace scdino {

using Metadata = std::map<std::string, std::string>;

/// The largest JSON header a reader accepts (as the reference implementation).
constexpr uint64_t kSafetensorsMaxHeader = 100u << 20;

/// Only the "__metadata__" of a file, reading just its header (for listing
/// large checkpoints).
StatusOr<Metadata> ReadSafetensorsMetadata(const std::string& path);

}  // namespace scdino
