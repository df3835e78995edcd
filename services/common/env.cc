#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

namespace scdino {

Status WriteError(int e, std::string message) {
  return (e == ENOSPC || e == EDQUOT) ? Status::NoSpace(std::move(message)) : Status::IOError(std::move(message));
}

std::string ThisHostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string TextfileDir() {
  const char* dir = std::getenv("SCDINO_TEXTFILE_DIR");
  if (dir && *dir) return dir;
  constexpr const char* kDebian = "/var/lib/prometheus/node-exporter";
  return ::access(kDebian, W_OK) == 0 ? kDebian : "";
}

namespace {

std::string Errno(int e = errno) { return std::strerror(e); }

std::string DirOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  // At most kWritePiece bytes per write(2). The page cache sizes the folio
  // it adds from the write's length: one write of 2 MiB or more gets 2 MiB
  // folios, and on a VM that hands freed 2 MiB blocks back to its host
  // (free page reporting: Firecracker, the build machines here) each such
  // folio is a fresh block the host must back again. Measured there
  // (docs/performance.md#writes-in-1-mib-pieces), with memory free: a new
  // 120 MiB file took about 1 s of kernel CPU in 2 MiB or larger writes and
  // 0.03 s in 1 MiB writes (with memory full of page cache, both cost).
  static constexpr size_t kWritePiece = size_t{1} << 20;
  Status Append(std::string_view data) override {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, std::min(data.size() - done, kWritePiece));
      if (n < 0) {
        if (errno == EINTR) continue;
        return WriteError(errno, "cannot write " + path_ + " after " + std::to_string(written_ + done) +
                                     " bytes: " + Errno());
      }
      done += static_cast<size_t>(n);
    }
    written_ += done;
    return Status::Ok();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return WriteError(errno, "fsync of " + path_ + " failed: " + Errno());
    return Status::Ok();
  }
  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return WriteError(errno, "close of " + path_ + " failed: " + Errno());
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
  size_t written_ = 0;
};

class Posix final : public Env {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& path, int mode) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
      const int e = errno;
      if (e == EEXIST) return Status::AlreadyExists("cannot create " + path + ": it already exists");
      return WriteError(e, "cannot create " + path + ": " + Errno(e));
    }
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IOError("cannot open " + path + " for appending: " + Errno());
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  Status SyncPath(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::IOError("cannot open " + path + " to fsync it: " + Errno());
    const int r = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    // Some file systems refuse fsync on a directory; the data is written.
    if (r != 0 && !(e == EINVAL || e == EROFS)) return Status::IOError("fsync of " + path + " failed: " + Errno(e));
    return Status::Ok();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int e = errno;  // a full directory or quota is NoSpace, as a full write is
      return WriteError(e, "cannot rename " + from + " to " + to + ": " + Errno(e));
    }
    return Status::Ok();
  }
  Status LinkFile(const std::string& from, const std::string& to) override {
    if (::link(from.c_str(), to.c_str()) != 0) {
      const int e = errno;
      if (e == EEXIST) return Status::AlreadyExists(to + " already exists");
      return Status::IOError("cannot link " + from + " to " + to + ": " + Errno(e));
    }
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      const int e = errno;
      if (e == ENOENT) return Status::NotFound("cannot remove " + path + ": no such file");
      return Status::IOError("cannot remove " + path + ": " + Errno(e));
    }
    return Status::Ok();
  }
  Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
    return Status::Ok();
  }
  Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return Status::IOError("cannot create directory " + path + ": " + ec.message());
    return Status::Ok();
  }
  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      const int e = errno;
      if (e == ENOENT) return Status::NotFound("no such directory: " + dir);
      return Status::IOError("cannot list " + dir + ": " + Errno(e));
    }
    std::vector<std::string> names;
    while (const dirent* ent = ::readdir(d)) {
      const std::string n = ent->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  bool FileExists(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }
  bool IsDirectory(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  StatusOr<std::string> ReadFile(const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      const int e = errno;
      if (!FileExists(path)) return Status::NotFound("no such file: " + path);
      return Status::IOError("cannot open " + path + ": " + Errno(e));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return Status::IOError("cannot read " + path + ": " + Errno());
    return ss.str();
  }
};

std::atomic<Env*> g_default{nullptr};

// The host name as part of a file name.
std::string HostNameForFiles() {
  std::string h = ThisHostName();
  // The name becomes part of a file name and of its '~'-separated fields.
  for (char& c : h) {
    if (c == '/' || c == '~') c = '_';
  }
  return h;
}

// The inode of /proc/self/ns/pid tells PID namespaces apart: a pid means
// nothing outside its own namespace (another container on the same host).
uint64_t PidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

std::string RandomHex64() {
  static thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  }());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

struct TempName {
  std::string host;
  uint64_t pidns = 0;
  int64_t pid = 0;
};

// Parses ".<name>.tmp~<host>~<pidns>~<pid>~<random>".
bool ParseTempName(const std::string& name, TempName* out) {
  if (name.empty() || name[0] != '.') return false;
  const auto tmp = name.rfind(".tmp~");
  if (tmp == std::string::npos || tmp == 0) return false;
  std::vector<std::string> f;
  std::stringstream ss(name.substr(tmp + 5));
  for (std::string part; std::getline(ss, part, '~');) f.push_back(part);
  if (f.size() != 4 || f[3].size() != 16) return false;
  try {
    out->host = f[0];
    out->pidns = std::stoull(f[1]);
    out->pid = std::stoll(f[2]);
  } catch (const std::exception&) {
    return false;
  }
  return out->pid > 0;
}

}  // namespace

Env* PosixEnv() {
  static Posix env;
  return &env;
}

Env* Env::Default() {
  Env* e = g_default.load();
  return e != nullptr ? e : PosixEnv();
}

Env* Env::SetDefaultForTesting(Env* env) {
  Env* previous = g_default.exchange(env);
  return previous != nullptr ? previous : PosixEnv();
}

std::string TempPathFor(const std::string& target) {
  static const std::string host = HostNameForFiles();
  static const uint64_t pidns = PidNamespace();
  const std::filesystem::path p(target);
  const std::string name = "." + p.filename().string() + ".tmp~" + host + "~" + std::to_string(pidns) + "~" +
                           std::to_string(::getpid()) + "~" + RandomHex64();
  return (p.parent_path() / name).string();
}

bool IsTemporaryName(const std::string& name) {
  TempName t;
  return ParseTempName(name, &t);
}

int CleanStaleTemporaries(const std::string& dir, bool recursive, Env* env,
                          std::optional<std::filesystem::file_time_type> foreign_before) {
  auto names = env->ListDir(dir);
  if (!names.ok()) return 0;
  static const std::string host = HostNameForFiles();
  static const uint64_t pidns = PidNamespace();
  int removed = 0;
  for (const auto& n : *names) {
    const std::string path = dir + "/" + n;
    TempName t;
    if (ParseTempName(n, &t)) {
      const bool here = t.host == host && t.pidns == pidns;
      const bool dead = here && ::kill(static_cast<pid_t>(t.pid), 0) != 0 && errno == ESRCH;
      std::error_code ec;
      const bool earlier = !here && foreign_before && std::filesystem::last_write_time(path, ec) < *foreign_before && !ec;
      if ((dead || earlier) && env->RemoveFile(path).ok()) {
        std::cerr << "scdino: removed " << path << ", left by a writer (pid " << t.pid
                  << (earlier ? " on " + t.host + ", before this run started" : std::string()) << ") that was killed\n";
        ++removed;
      }
      continue;
    }
    if (recursive && env->IsDirectory(path)) removed += CleanStaleTemporaries(path, true, env, foreign_before);
  }
  return removed;
}

AtomicFile::AtomicFile(std::string target, Env* env) : target_(std::move(target)), env_(env) {}

AtomicFile::~AtomicFile() {
  file_.reset();
  if (created_ && !committed_) (void)env_->RemoveFile(temp_);
}

Status AtomicFile::Create(int mode, bool open) {
  temp_ = TempPathFor(target_);
  auto f = env_->NewExclusiveFile(temp_, mode);
  if (!f.ok()) {
    // A random name that exists already was planted there: never write
    // through it.
    if (f.status().code() == StatusCode::kAlreadyExists) return Status::IOError(f.status().message());
    return f.status();
  }
  created_ = true;
  file_ = std::move(f).value();
  if (!open) {
    Status s = file_->Close();
    file_.reset();
    return s;
  }
  return Status::Ok();
}

Status AtomicFile::Commit() {
  auto fail = [&](const Status& s) {
    return Status::WriteFailed(s, "cannot write " + target_ + ": " + s.message() +
                                      "; the previous file, if any, is unchanged");
  };
  if (!created_) return Status::Internal("AtomicFile::Commit of " + target_ + " before Create");
  if (file_) {
    if (Status s = file_->Sync(); !s.ok()) return fail(s);
    if (Status s = file_->Close(); !s.ok()) return fail(s);
    file_.reset();
  } else if (Status s = env_->SyncPath(temp_); !s.ok()) {
    return fail(s);
  }
  if (Status s = env_->RenameFile(temp_, target_); !s.ok()) return fail(s);
  committed_ = true;
  // Best effort: the file is complete either way; this makes the rename
  // itself survive a power loss.
  (void)env_->SyncPath(DirOf(target_));
  return Status::Ok();
}

}  // namespace scdino
