#include "control/token.h"

#include <algorithm>

#include "common/digest.h"
#include "common/files.h"

namespace scdino::control {

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

StatusOr<std::string> ReadToken(const std::string& path) {
  auto text = ReadOwnFile(path, "the control token", Exposure::kPrivate, 4096);
  if (!text.ok()) return text.status();
  std::string token = Trim(*text);
  if (token.size() < 16) return Status::InvalidArgument(path + ": the control token is shorter than 16 characters");
  return token;
}

StatusOr<std::string> LoadOrCreateToken(const std::string& path) {
  return LoadOrCreateSecret(path, "the control token");
}

bool TokensEqual(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string TokenProof(const std::string& token, const std::string& message) { return HmacSha256Hex(token, message); }

}  // namespace scdino::control
