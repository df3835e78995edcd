#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace scdino {

Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  AtomicFile f(path);
  if (Status s = f.Create(mode); !s.ok()) {
    return Status::IOError("cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  if (Status s = f.file()->Append(data); !s.ok()) {
    return Status::IOError("cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  return f.Commit();
}

StatusOr<std::string> ReadFile(const std::string& path) { return Env::Default()->ReadFile(path); }

StatusOr<std::string> ReadOwnFile(const std::string& path, const std::string& what, Exposure exposure,
                                  size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::NotFound(path + ": no such file (" + what + ")");
    if (e == ELOOP) return Status::FailedPrecondition(path + ": " + what + " is a symbolic link; refusing it");
    return Status::IOError(path + ": cannot open " + what + ": " + std::strerror(e));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IOError(path + ": cannot fstat " + what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(path + ": " + what + " is not a regular file; refusing it");
  if (st.st_uid != ::geteuid()) {
    return Status::FailedPrecondition(path + ": " + what + " belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to you (uid " + std::to_string(::geteuid()) + "); refusing it");
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(st.st_mode & 0777));
  if (exposure == Exposure::kPrivate && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    return Status::FailedPrecondition(path + ": " + what + " is open to others (mode " + mode +
                                      "); expected 600: chmod 600 it");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return Status::FailedPrecondition(path + ": others can write " + what + " (mode " + mode +
                                      "); refusing it (chmod go-w it)");
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    return Status::FailedPrecondition(path + ": too large for " + what);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

Status MakeDirs(const std::string& path) { return Env::Default()->CreateDirs(path); }

bool FileExists(const std::string& path) { return Env::Default()->FileExists(path); }

}  // namespace scdino
