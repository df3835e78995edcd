// The file-system layer every scdino file goes through (in the manner of
// leveldb's Env): exclusive no-follow creation, appending, fsync of files and
// directories, rename, link, listing and removal, each returning a Status
// that names the path and the system's reason. Env::Default() is the POSIX
// implementation; tests install a FaultInjectingEnv (common/fault_env.h) in
// its place to produce disk-full, permission and partial-write failures.
//
// Thread-safety: Env implementations are thread-safe; a WritableFile is used
// by one thread at a time.
#pragma once

#include <memory>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace scdino {

/// A file being written. Close() is implied by destruction (errors then
/// go unreported: call Close() where they matter).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  /// Writes all of `data` (retrying short writes); an error names the file,
  /// the bytes written so far and the reason (ENOSPC: "No space left on device").
  virtual Status Append(std::string_view data) = 0;
  /// fsync: the data is on stable storage when it returns OK.
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  /// The Env in use: the POSIX one, unless a test installed another.
  static Env* Default();
  /// Installs `env` as Default() (nullptr: the POSIX one again) and returns
  /// the previous one. For tests; not to be called while files are written.
  static Env* SetDefaultForTesting(Env* env);

  /// Creates `path`, which must not exist (O_CREAT | O_EXCL | O_NOFOLLOW,
  /// so neither a planted file nor a symlink is ever written through).
  virtual StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& path, int mode) = 0;
  /// Opens `path` for appending, creating it (mode 0644) when missing; a
  /// symlink is refused (O_NOFOLLOW).
  virtual StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  /// fsync of an existing file or directory by path (for files written by
  /// libraries that only take a path, and for directories after a rename).
  virtual Status SyncPath(const std::string& path) = 0;
  /// rename(2): atomically replaces `to`.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  /// link(2): installs `from` as `to` only when `to` does not exist
  /// (AlreadyExists otherwise).
  virtual Status LinkFile(const std::string& from, const std::string& to) = 0;
  /// unlink(2); NotFound when it does not exist.
  virtual Status RemoveFile(const std::string& path) = 0;
  /// A directory and everything below it; OK when it does not exist.
  virtual Status RemoveTree(const std::string& path) = 0;
  /// mkdir -p.
  virtual Status CreateDirs(const std::string& path) = 0;
  /// Entry names of a directory (not "." and ".."), sorted.
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  /// A whole file; NotFound or IOError name the path.
  virtual StatusOr<std::string> ReadFile(const std::string& path) = 0;
};

/// A write that failed with errno `e`: NoSpace for a full disk or quota
/// (ENOSPC, EDQUOT: never worth a retry), else IOError.
Status WriteError(int e, std::string message);

/// The POSIX Env (what Env::Default() returns unless a test replaced it).
Env* PosixEnv();

/// This machine's host name (gethostname); "localhost" when it has none.
std::string ThisHostName();

/// Where gauges for node_exporter's textfile collector go: $SCDINO_TEXTFILE_DIR,
/// else Debian's /var/lib/prometheus/node-exporter where it is writable, else "".
std::string TextfileDir();

/// A temporary name beside `target` that no other writer can hold: hidden,
/// and carrying the host name, the PID namespace, the pid and 64 random bits
/// (".<name>.tmp~<host>~<pidns>~<pid>~<random>"), so writers on different
/// nodes or in different containers of one shared directory never collide.
std::string TempPathFor(const std::string& target);

/// Whether `name` (a file name, not a path) is such a temporary.
bool IsTemporaryName(const std::string& name);

/// Removes the temporaries under `dir` (recursively when asked) that were
/// left by a writer that was killed: written on this host, in this PID
/// namespace, by a process that no longer exists. Temporaries of live
/// writers are left alone; so are those of other hosts/containers, unless
/// `foreign_before` is given (a run's start, by a process that holds the run
/// directory: launch/run_lock.h) and they were last written before it: their
/// writer belonged to an earlier attempt, on a node this one cannot look
/// into. Returns how many were removed; a missing directory is not an error.
int CleanStaleTemporaries(const std::string& dir, bool recursive, Env* env = Env::Default(),
                          std::optional<std::filesystem::file_time_type> foreign_before = std::nullopt);

/// A file written under a temporary name and installed atomically: Commit()
/// fsyncs it, renames it over the target and fsyncs the directory; without
/// Commit() the destructor removes the temporary, so a failed write leaves a
/// previous target untouched. For writers that need a path (libhdf5,
/// libtiff) use path() and Create(false); others Append() through file().
class AtomicFile {
 public:
  explicit AtomicFile(std::string target, Env* env = Env::Default());
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Creates the temporary exclusively. With open = false it is created and
  /// closed at once, for a library to reopen by path().
  Status Create(int mode = 0644, bool open = true);
  WritableFile* file() { return file_.get(); }
  const std::string& path() const { return temp_; }
  const std::string& target() const { return target_; }
  /// Close, fsync, rename over the target, fsync the directory.
  Status Commit();

 private:
  std::string target_, temp_;
  Env* env_;
  std::unique_ptr<WritableFile> file_;
  bool created_ = false, committed_ = false;
};

}  // namespace scdino
