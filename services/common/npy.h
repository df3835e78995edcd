// NumPy's .npy format (version 1.0): a magic string, a Python-literal header
// {'descr', 'fortran_order', 'shape'} padded to 64 bytes, then the raw
// little-endian C-order data. Features leave scdino in it, so numpy.load
// (and anything built on it) reads them with no converter.
// Functions of their arguments; thread-safe on distinct files.
#pragma once

#include <torch/types.h>

#include <string>

#include "common/status.h"

namespace scdino {

/// Writes a float32, float64, int32 or int64 tensor (any device and shape;
/// copied to contiguous CPU memory) atomically: a failed write keeps an
/// existing file. InvalidArgument names another dtype.
Status WriteNpy(const std::string& path, const torch::Tensor& t);

/// Reads a C-order little-endian '<f4', '<f8', '<i4' or '<i8' array.
/// DataLoss names the path and what does not parse or is truncated.
StatusOr<torch::Tensor> ReadNpy(const std::string& path);

}  // namespace scdino
