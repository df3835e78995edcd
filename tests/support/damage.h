// Damaged copies of a file's bytes for the fuzz tests of every reader
// (TIFF, .npy, safetensors, metadata.json): half truncated at a random
// length, half with random bytes overwritten, mostly within the first
// `header_bytes` where the structure is. Seeded: the same cases every run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace scdino::testing {

inline std::vector<std::string> Damaged(const std::string& bytes, size_t header_bytes, uint32_t seed,
                                        int cases = 40) {
  std::vector<std::string> out;
  std::mt19937 rng(seed);
  const size_t header = std::max<size_t>(1, std::min(header_bytes, bytes.size()));
  for (int t = 0; t < cases; ++t) {
    std::string b = bytes;
    if (t % 2 == 0) {
      b.resize(std::uniform_int_distribution<size_t>(0, b.size() - 1)(rng));
    } else {
      for (int k = 0; k < 1 + t / 8; ++k) {
        // Every third flip anywhere, the others in the header.
        const size_t range = k % 3 == 2 ? b.size() : header;
        b[std::uniform_int_distribution<size_t>(0, range - 1)(rng)] =
            static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace scdino::testing
