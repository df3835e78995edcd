// Staging a packed set on node-local storage (data/packed.h): copied with
// its shards verified on the way, in directories only this user can change,
// and reused while the proof of what was verified holds.
#include "data/packed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/files.h"
#include "common/fingerprint.h"
#include "data/packed_format.h"

namespace scdino::data {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pack_format;

namespace {

std::string ModeText(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// A directory of the stage: created 0700 when missing; otherwise it must be
// a real directory (no symlink) of this user with no permission for group
// or others. Refusals name the path, the owner and mode found and what was
// expected, and remove nothing (it may not be ours).
Status OwnPrivateDir(const std::string& dir, const std::string& what) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(dir + ": cannot create " + what + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::IOError(dir + ": " + std::strerror(errno));
  const uid_t me = ::geteuid();
  // One of ours that others may only read (an older scdino made it 0755):
  // made private. Writable by others, it may hold what they put there.
  if (S_ISDIR(st.st_mode) && st.st_uid == me && (st.st_mode & 022) == 0 && (st.st_mode & 077) != 0 &&
      ::chmod(dir.c_str(), 0700) == 0) {
    st.st_mode &= ~static_cast<mode_t>(077);
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077) != 0) {
    const std::string found = S_ISLNK(st.st_mode) ? "a symbolic link" : !S_ISDIR(st.st_mode) ? "not a directory"
                                                                                           : "a directory";
    return Status::FailedPrecondition(
        dir + ": " + what + " is " + found + " of uid " + std::to_string(st.st_uid) + " with mode " +
        ModeText(st.st_mode) + "; expected a directory of yours (uid " + std::to_string(me) +
        ") with mode 0700: another user may have made it to plant data. It is left as it is; set "
        "SCDINO_STAGE_DIR to a directory of your own (a per-job $SLURM_TMPDIR where the site gives one)");
  }
  return Status::Ok();
}

// What proves a shard of a staged copy unchanged since it was verified: its
// inode, size and times. Only its owner (this user) or root can change a
// file in a 0700 directory, and any change, even a chmod or a rename in
// and back, moves its ctime, which no user can set.
struct ShardProof {
  std::string file;
  int64_t ino = 0, bytes = 0, mtime_ns = 0, ctime_ns = 0;
};

StatusOr<ShardProof> ProveShard(const std::string& dir, const std::string& file) {
  const std::string path = dir + "/" + file;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::NotFound(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1 || (st.st_mode & 022) != 0) {
    return Status::FailedPrecondition(path + ": a staged shard must be a regular file of yours (uid " +
                                      std::to_string(::geteuid()) + ") with one link and no write permission for "
                                      "others; found uid " + std::to_string(st.st_uid) + ", mode " +
                                      ModeText(st.st_mode) + ", " + std::to_string(st.st_nlink) + " link(s)");
  }
  return ShardProof{file, static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

json ProofJson(const ShardProof& p) {
  return {{"file", p.file}, {"ino", p.ino}, {"bytes", p.bytes}, {"mtime_ns", p.mtime_ns}, {"ctime_ns", p.ctime_ns}};
}

// Copies `from` to `to`, checking its size, CRC-32 and SHA-256 against
// pack.json's as it goes.
Status CopyVerified(const std::string& from, const std::string& to, const ShardInfo& want,
                    const std::function<bool()>& should_stop, const std::function<void(int64_t)>& copied) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::FailedPrecondition(from + ": cannot open: " + std::strerror(errno));
  AtomicFile out(to);
  Status st = out.Create();
  uint32_t crc = 0;
  Sha256 sha;
  int64_t total = 0;
  std::string buf(8 << 20, '\0');
  while (st.ok()) {
    // A stop (a preemption during staging) ends it within one 8 MiB block;
    // the half-written copy is removed (AtomicFile) and nothing is marked.
    if (should_stop && should_stop()) {
      st = Status::Aborted("stopped while staging " + from + " (" + std::to_string(total >> 20) + " of " +
                           std::to_string(want.bytes >> 20) + " MiB copied); the next staging starts it again");
      break;
    }
    const ssize_t got = ::read(in, buf.data(), buf.size());
    if (got < 0) st = Status::IOError(from + ": read failed: " + std::strerror(errno));
    if (got <= 0) break;
    crc = Crc32(buf.data(), static_cast<size_t>(got), crc);
    sha.Update(buf.data(), static_cast<size_t>(got));
    total += got;
    st = out.file()->Append(std::string_view(buf.data(), static_cast<size_t>(got)));
    if (copied) copied(got);
  }
  ::close(in);
  if (!st.ok()) return st;
  const std::string digest = sha.HexDigest();
  if (total != want.bytes || crc != want.crc32 || digest != want.sha256) {
    return Status::DataLoss(from + ": " + std::to_string(total) + " bytes with CRC-32 " + Hex32(crc) + " and SHA-256 " +
                            digest + ", pack.json says " + std::to_string(want.bytes) + " bytes with " +
                            Hex32(want.crc32) + " and " + want.sha256 +
                            ": the shared copy is corrupt or changed; pack it again");
  }
  return out.Commit();
}

// Copies under `root` beyond the newest `keep` (by last use: the marker's
// modification time, set again at each reuse), except `current`. Only
// directories of this user named as a copy is (16 hex digits) are removed.
std::vector<std::string> EvictStagedCopies(const std::string& root, int64_t keep, const std::string& current) {
  std::vector<std::pair<int64_t, std::string>> copies;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 16 || name.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    struct stat marker {};
    const bool staged = ::lstat((e.path().string() + "/.staged").c_str(), &marker) == 0;
    const auto& t = staged ? marker.st_mtim : st.st_mtim;
    copies.emplace_back(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec, e.path().string());
  }
  std::sort(copies.rbegin(), copies.rend());
  std::vector<std::string> removed;
  int64_t kept = 0;
  for (const auto& [when, path] : copies) {
    if (path == current || kept < keep - 1) {
      if (path != current) ++kept;
      continue;
    }
    fs::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

}  // namespace

StatusOr<std::string> StagedCopy(const PackedSet& set, const std::string& root) {
  if (!fs::exists(root)) return std::string();
  if (auto st = OwnPrivateDir(root, "the stage directory"); !st.ok()) return st;
  const std::string dir = root + "/" + set.content_fingerprint();
  if (!fs::exists(dir)) return std::string();
  if (auto st = OwnPrivateDir(dir, "the staged copy"); !st.ok()) return st;
  auto marker = ReadFile(dir + "/.staged");
  if (!marker.ok()) return std::string();
  auto m = json::parse(*marker, nullptr, false);
  if (!m.is_object() || m.value("pack", "") != set.content_fingerprint() || !m.contains("shards") ||
      m["shards"].size() != set.shards().size()) {
    return std::string();
  }
  for (size_t i = 0; i < set.shards().size(); ++i) {
    auto proof = ProveShard(dir, set.shards()[i].file);
    if (!proof.ok()) return proof.status();
    if (ProofJson(*proof) != m["shards"][i]) {
      return Status::DataLoss(dir + "/" + set.shards()[i].file +
                              ": changed since it was verified (its inode, size or times differ from the .staged "
                              "record); it is staged again");
    }
  }
  return dir;
}

StatusOr<StageReport> StagePackedSet(const PackedSet& set, const std::string& root,
                                     const std::function<bool()>& should_stop, int64_t keep,
                                     const std::function<void(int64_t, int64_t)>& on_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  StageReport r;
  r.dir = root + "/" + set.content_fingerprint();
  r.bytes = set.total_bytes();
  for (const auto& s : set.shards()) {
    if (s.sha256.size() != 64) {
      return Status::FailedPrecondition(set.files_dir() + "/pack.json: shard " + s.file +
                                        " has no SHA-256 (packed by an older scdino): pack the data set again to "
                                        "stage it; reading the shared copy meanwhile");
    }
  }
  if (const auto parent = fs::path(root).parent_path(); !parent.empty() && !fs::exists(parent)) {
    if (auto st = MakeDirs(parent.string()); !st.ok()) return st;
  }
  if (auto st = OwnPrivateDir(root, "the stage directory"); !st.ok()) return st;
  auto staged = StagedCopy(set, root);
  if (staged.ok() && !staged->empty()) {
    r.reused = true;
    ::utimensat(AT_FDCWD, (r.dir + "/.staged").c_str(), nullptr, 0);  // its last use, for the eviction
  } else {
    // A copy's directory that is not ours is refused as it is, untouched.
    if (auto st = OwnPrivateDir(r.dir, "the staged copy"); !st.ok()) return st;
    ::unlink((r.dir + "/.staged").c_str());
    // Room for the whole set (any file already there is copied again: only
    // a copy verified by this process is trusted).
    struct statvfs v {};
    if (::statvfs(r.dir.c_str(), &v) == 0) {
      const int64_t avail = static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
      if (avail < r.bytes + (r.bytes >> 6)) {
        return Status::FailedPrecondition(r.dir + ": " + std::to_string(avail >> 20) + " MiB free, staging " +
                                          set.dataset().root + " needs " + std::to_string(r.bytes >> 20) + " MiB");
      }
    }
    CleanStaleTemporaries(r.dir, false);
    const std::string src = set.files_dir();
    json proofs = json::array();
    int64_t copied = 0;
    auto count = [&](int64_t bytes) {
      copied += bytes;
      if (on_progress) on_progress(copied, r.bytes);
    };
    count(0);
    for (const auto& s : set.shards()) {
      ::unlink((r.dir + "/" + s.file).c_str());
      if (auto st = CopyVerified(src + "/" + s.file, r.dir + "/" + s.file, s, should_stop, count); !st.ok()) return st;
      auto proof = ProveShard(r.dir, s.file);
      if (!proof.ok()) return proof.status();
      proofs.push_back(ProofJson(*proof));
    }
    // The index and manifest this set was opened with (a repack meanwhile
    // is refused, not mixed in).
    auto index = ReadFile(src + "/index.csv");
    if (!index.ok()) return index.status();
    if (static_cast<int64_t>(index->size()) != set.index_bytes() ||
        Crc32(index->data(), index->size()) != set.index_crc32()) {
      return Status::DataLoss(src + "/index.csv changed while staging (packed again?); stage again");
    }
    auto manifest = ReadFile(src + "/pack.json");
    if (!manifest.ok()) return manifest.status();
    if (Fingerprint(*manifest) != set.content_fingerprint()) {
      return Status::DataLoss(src + "/pack.json changed while staging (packed again?); stage again");
    }
    if (auto st = WriteFileAtomic(r.dir + "/index.csv", *index, 0600); !st.ok()) return st;
    if (auto st = WriteFileAtomic(r.dir + "/pack.json", *manifest, 0600); !st.ok()) return st;
    const json marker = {{"pack", set.content_fingerprint()}, {"shards", proofs}};
    if (auto st = WriteFileAtomic(r.dir + "/.staged", marker.dump() + "\n", 0600); !st.ok()) return st;
  }
  if (keep > 0) r.evicted = EvictStagedCopies(root, keep, r.dir);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace scdino::data
