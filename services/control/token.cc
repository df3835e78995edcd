#include "control/token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/env.h"

namespace scdino::control {

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += hex[p[i] >> 4];
    out += hex[p[i] & 15];
  }
  return out;
}

std::string Mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%o", static_cast<unsigned>(m & 0777));
  return buf;
}

}  // namespace

StatusOr<std::string> ReadToken(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::NotFound(path + ": no control token file");
    if (e == ELOOP) return Status::FailedPrecondition(path + ": the control token is a symbolic link; refusing to read it");
    return Status::IOError(path + ": cannot open the control token: " + std::strerror(e));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IOError(path + ": cannot fstat the control token: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(path + ": the control token is not a regular file");
  if (st.st_uid != ::geteuid()) {
    return Status::FailedPrecondition(path + ": the control token belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to you (uid " + std::to_string(::geteuid()) +
                                      "); only the run's own token is ever sent");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return Status::FailedPrecondition(path + ": the control token is open to others (mode " + Mode(st.st_mode) +
                                      "); expected 600: chmod 600 it");
  }
  if (st.st_size > 4096) return Status::FailedPrecondition(path + ": too large for a control token");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  std::string token = Trim(text);
  if (token.size() < 16) return Status::InvalidArgument(path + ": the control token is shorter than 16 characters");
  return token;
}

StatusOr<std::string> LoadOrCreateToken(const std::string& path) {
  Env* env = Env::Default();
  if (env->FileExists(path)) return ReadToken(path);
  unsigned char raw[32];
  std::random_device rd;  // /dev/urandom (or the CPU's generator) on Linux
  for (auto& b : raw) b = static_cast<unsigned char>(rd());
  const std::string line = Hex(raw, sizeof raw) + "\n";
  // Written under a private exclusive name, then linked into place: link
  // fails if another process created the token meanwhile, and then both use
  // that one.
  const std::string tmp = TempPathFor(path);
  auto f = env->NewExclusiveFile(tmp, 0600);
  if (!f.ok()) return Status::IOError(path + ": cannot create the control token: " + f.status().message());
  Status s = (*f)->Append(line);
  if (s.ok()) s = (*f)->Sync();
  if (s.ok()) s = (*f)->Close();
  if (s.ok()) s = env->LinkFile(tmp, path);
  (void)env->RemoveFile(tmp);
  if (!s.ok() && s.code() != StatusCode::kAlreadyExists) {
    return Status::IOError(path + ": cannot create the control token: " + s.message());
  }
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

std::string TokenProof(const std::string& token, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return Hex(mac, len);
}

}  // namespace scdino::control
