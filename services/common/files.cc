#include "common/files.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "common/digest.h"

namespace scdino {

Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  AtomicFile f(path);
  if (Status s = f.Create(mode); !s.ok()) {
    return Status::WriteFailed(s, "cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  if (Status s = f.file()->Append(data); !s.ok()) {
    return Status::WriteFailed(s, "cannot write " + path + ": " + s.message() + "; the previous file, if any, is unchanged");
  }
  return f.Commit();
}

Status CopyFileAtomic(const std::string& from, const std::string& to) {
  Env* env = Env::Default();
  auto fail = [&](const Status& s) {
    return Status::WriteFailed(s, "cannot keep " + from + " as " + to + ": " + s.message() +
                                      "; the previous file, if any, is unchanged");
  };
  const std::string link = TempPathFor(to);
  if (env->LinkFile(from, link).ok()) {
    if (Status s = env->RenameFile(link, to); !s.ok()) {
      (void)env->RemoveFile(link);
      return fail(s);
    }
    (void)env->SyncPath(std::filesystem::path(to).parent_path().string());
    return Status::Ok();
  }
  // No hard links here (or across mounts): a copy.
  std::ifstream in(from, std::ios::binary);
  if (!in) return fail(Status::IOError("cannot open " + from + ": " + std::strerror(errno)));
  AtomicFile out(to, env);
  if (Status s = out.Create(); !s.ok()) return fail(s);
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() <= 0) break;
    if (Status s = out.file()->Append({buf.data(), static_cast<size_t>(in.gcount())}); !s.ok()) return fail(s);
  }
  if (in.bad()) return fail(Status::IOError("cannot read " + from + ": " + std::strerror(errno)));
  if (Status s = out.Commit(); !s.ok()) return fail(s);
  return Status::Ok();
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

namespace {

std::string UserName(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  }
  return "uid " + std::to_string(uid);
}

std::string Octal(unsigned mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%o", mode & 07777);
  return text;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Status CheckOwnPath(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) return Status::NotFound(path + ": no such file or directory (" + what + ")");
    return Status::FailedPrecondition(path + ": cannot check " + what + ": " + std::strerror(e));
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return Status::FailedPrecondition(path + ": " + what + " belongs to " + UserName(st.st_uid) + ", not to you (" +
                                      UserName(me) + "); refusing it: another user could have put it there. Use " +
                                      "a " + (S_ISDIR(st.st_mode) ? "directory" : "file") + " of your own");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return Status::FailedPrecondition(path + ": " + what + " can be written by " +
                                      ((st.st_mode & S_IWOTH) ? "every user" : "its group") + " (mode " +
                                      Octal(st.st_mode) + "); refusing it: run chmod go-w " + path);
  }
  return Status::Ok();
}

Status MakeOwnDir(const std::string& path, int mode, const std::string& what) {
  const bool existed = Env::Default()->IsDirectory(path);
  if (!existed) {
    if (auto s = MakeDirs(path); !s.ok()) return s;
    if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
      return Status::IOError(path + ": cannot set mode " + Octal(static_cast<unsigned>(mode)) + " on " + what + ": " +
                             std::strerror(errno));
    }
  }
  return CheckOwnPath(path, what);
}

std::string NewSecret() {
  std::random_device rd;  // /dev/urandom (or the CPU's generator) on Linux
  unsigned char bytes[32];
  for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  return HexEncode(bytes, sizeof bytes);
}

StatusOr<std::string> LoadOrCreateSecret(const std::string& path, const std::string& what) {
  Env* env = Env::Default();
  auto read = [&]() -> StatusOr<std::string> {
    auto text = ReadOwnFile(path, what, Exposure::kPrivate, 4096);
    if (!text.ok()) return text.status();
    std::string secret = Trimmed(*text);
    if (secret.size() < 16) return Status::InvalidArgument(path + ": " + what + " is shorter than 16 characters");
    return secret;
  };
  if (env->FileExists(path)) return read();
  const std::string line = NewSecret() + "\n";
  // Linked into place: link fails if another process created the file
  // meanwhile, and then both use that one.
  const std::string tmp = TempPathFor(path);
  auto f = env->NewExclusiveFile(tmp, 0600);
  if (!f.ok()) return Status::IOError(path + ": cannot create " + what + ": " + f.status().message());
  Status s = (*f)->Append(line);
  if (s.ok()) s = (*f)->Sync();
  if (s.ok()) s = (*f)->Close();
  if (s.ok()) s = env->LinkFile(tmp, path);
  (void)env->RemoveFile(tmp);
  if (!s.ok() && s.code() != StatusCode::kAlreadyExists) {
    return Status::IOError(path + ": cannot create " + what + ": " + s.message());
  }
  return read();
}

bool FileExists(const std::string& path) { return Env::Default()->FileExists(path); }

Status RetryWhileFileLags(const std::function<Status()>& attempt, const std::string& what, std::ostream* log,
                          const std::vector<std::chrono::milliseconds>& waits) {
  Status s = attempt();
  std::chrono::milliseconds waited{0};
  for (const auto& wait : waits) {
    if (s.ok() || (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kDataLoss)) return s;
    if (waited.count() == 0 && log != nullptr) {
      *log << "scdino: " << what << ": " << s.message() << "; a shared file system may show it late: trying again for up to "
           << std::chrono::duration_cast<std::chrono::seconds>(
                  std::accumulate(waits.begin(), waits.end(), std::chrono::milliseconds(0)))
                  .count()
           << " s\n";
    }
    std::this_thread::sleep_for(wait);
    waited += wait;
    s = attempt();
  }
  if (s.ok() || waited.count() == 0 || (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kDataLoss)) return s;
  const std::string how_long = waited.count() % 1000 == 0 ? std::to_string(waited.count() / 1000) + " s"
                                                          : std::to_string(waited.count()) + " ms";
  const std::string m = s.message() + " (still so after " + how_long + " of waiting for a lagging file system)";
  return s.code() == StatusCode::kNotFound ? Status::NotFound(m) : Status::DataLoss(m);
}

}  // namespace scdino
