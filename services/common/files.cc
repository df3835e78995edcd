#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace scdino {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string DirOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IOError("cannot create " + tmp + " (to write " + path + "): " + Errno());
  }
  auto fail = [&](const std::string& what) {
    std::string reason = Errno();
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::IOError("cannot write " + path + ": " + what + ": " + reason +
                           "; the previous file, if any, is unchanged");
  };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write failed after " + std::to_string(done) + " of " +
                  std::to_string(data.size()) + " bytes");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync failed");
  if (::close(fd) != 0) {
    std::string reason = Errno();
    ::unlink(tmp.c_str());
    return Status::IOError("cannot write " + path + ": close failed: " + reason);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string reason = Errno();
    ::unlink(tmp.c_str());
    return Status::IOError("cannot rename " + tmp + " to " + path + ": " + reason);
  }
  int dfd = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!FileExists(path)) return Status::NotFound("no such file: " + path);
    return Status::IOError("cannot open " + path + ": " + Errno());
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path + ": " + Errno());
  return ss.str();
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::IOError("cannot create directory " + path + ": " + ec.message());
  return Status::Ok();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace scdino
