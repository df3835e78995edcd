#include "control/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "common/files.h"

namespace scdino::control {

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

StatusOr<std::string> RandomHex(size_t bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string raw(bytes, '\0');
  if (!urandom.read(raw.data(), static_cast<std::streamsize>(bytes))) {
    return Status::IOError("cannot read /dev/urandom for the control token");
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

}  // namespace

StatusOr<std::string> ReadToken(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": no control token file");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(st.st_mode & 0777));
    return Status::FailedPrecondition(path + ": the control token is readable by others (mode " + mode +
                                      "); expected 600: chmod 600 it");
  }
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string token = Trim(*text);
  if (token.size() < 16) return Status::InvalidArgument(path + ": the control token is shorter than 16 characters");
  return token;
}

StatusOr<std::string> LoadOrCreateToken(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return ReadToken(path);
  auto token = RandomHex(32);
  if (!token.ok()) return token.status();
  // Written under a private temporary name, then linked into place: link
  // fails if another process created the token meanwhile, and then both use
  // that one.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::IOError(tmp + ": cannot create the control token: " + std::strerror(errno));
  const std::string line = *token + "\n";
  const bool wrote = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!wrote) {
    ::unlink(tmp.c_str());
    return Status::IOError(tmp + ": cannot write the control token: " + std::strerror(errno));
  }
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && err != EEXIST) return Status::IOError(path + ": cannot create the control token: " + std::strerror(err));
  return ReadToken(path);
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

}  // namespace scdino::control
