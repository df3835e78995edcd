// A short fingerprint of a text (64-bit FNV-1a as 16 hex digits): the same
// in every build and on every machine, so a file written by one binary is
// recognised by another (feature shards, channel statistics). Not a
// cryptographic hash: it tells inputs apart, it does not authenticate them.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace scdino {

inline std::string Fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace scdino
