// The one overflow-checked size of an array a file's header describes
// (safetensors, .npy, a packed image, a TIFF page or tile): every reader
// proves the shape fits before it sizes or allocates anything from it, so a
// hostile header gives the reader's error, never an overflow or a throw from
// the allocator. Header-only; pure.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace scdino {

/// Bytes of a dense array of `shape` with `element_size`-byte elements, or
/// nullopt if a dimension is negative or the array does not fit in int64.
/// A zero dimension makes the array empty (0 bytes), but the other
/// dimensions must still fit together: a tensor's strides multiply them
/// (zeros counted as one), so [2^32, 2^32, 0] is refused.
inline std::optional<uint64_t> ArrayBytes(const std::vector<int64_t>& shape, uint64_t element_size) {
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t strided = element_size == 0 ? 1 : element_size;
  bool empty = element_size == 0;
  for (int64_t s : shape) {
    if (s < 0) return std::nullopt;
    if (s == 0) empty = true;
    const uint64_t d = s == 0 ? 1 : static_cast<uint64_t>(s);
    if (__builtin_mul_overflow(strided, d, &strided) || strided > kLimit) return std::nullopt;
  }
  return empty ? 0 : strided;
}

/// "(2, 3, 4)", as NumPy prints a shape.
inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

}  // namespace scdino
