// Reader and writer of the safetensors format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {string: string}}, then the raw little-endian tensor bytes. It is the format
// of every checkpoint and weights file, so weights move to and from the
// Python ecosystem under the reference DINO names. A file's metadata alone
// (no LibTorch) is common/safetensors_metadata.h's.
// Functions of their arguments; thread-safe on distinct files.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <string_view>

#include "common/safetensors_metadata.h"
#include "common/status.h"

namespace scdino {

using TensorMap = std::map<std::string, torch::Tensor>;

struct SafetensorsFile {
  TensorMap tensors;  ///< CPU tensors, contiguous, owning their memory
  Metadata metadata;  ///< the "__metadata__" object (string values only)
};

/// Serialises tensors (any device; copied to CPU) and metadata. Supported
/// dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL. Throws StatusError on an
/// unsupported dtype, naming the tensor.
std::string SerializeSafetensors(const TensorMap& tensors, const Metadata& metadata = {});

/// Parses bytes produced by any safetensors writer. `origin` (a path) is named
/// in every error, with the tensor and what was wrong.
StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& origin);

StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

/// Writes atomically (see WriteFileAtomic): a failed write keeps the old file.
Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                        const Metadata& metadata = {});

}  // namespace scdino
