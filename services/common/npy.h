// NumPy's .npy format (version 1.0): a magic string, a Python-literal header
// {'descr', 'fortran_order', 'shape'} padded to 64 bytes, then the raw
// little-endian C-order data. Features leave scdino in it, so numpy.load
// (and anything built on it) reads them with no converter.
// Functions of their arguments; thread-safe on distinct files.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace scdino {

/// The one .npy codec's two halves, shared by the features' files and the
/// packed data sets' members (data/packed.h).
/// The header of an array of `descr` ('<f4', '|u1', ...) and `shape`, C
/// order: magic, version 1.0, length, the dict padded to a multiple of 64.
std::string NpyHeader(const std::string& descr, const std::vector<int64_t>& shape);

struct NpyLayout {
  std::string descr;           ///< as written: '<f4', '|u1', 'f8', ...
  std::vector<int64_t> shape;
  bool fortran_order = false;
  size_t data_offset = 0;      ///< where the data begins
};
/// The header at the start of `size` bytes (versions 1 to 3); DataLoss,
/// naming `where`, when it does not parse or its sizes are not sizes.
StatusOr<NpyLayout> ParseNpyHeader(const char* data, size_t size, const std::string& where);

/// Writes a float32, float64, int32 or int64 tensor (any device and shape;
/// copied to contiguous CPU memory) atomically: a failed write keeps an
/// existing file. InvalidArgument names another dtype.
Status WriteNpy(const std::string& path, const torch::Tensor& t);

/// Reads a C-order little-endian '<f4', '<f8', '<i4' or '<i8' array.
/// DataLoss names the path and what does not parse or is truncated.
StatusOr<torch::Tensor> ReadNpy(const std::string& path);

}  // namespace scdino
