// A fault-injecting Env for tests: every call goes to the POSIX Env unless a
// fault matches it, in which case it fails as the system would (disk full
// after some bytes, permission denied, a failed fsync or rename). Installed
// as Env::Default() for the lifetime of a ScopedFaultEnv, so the code under
// test needs no seam of its own. Thread-safe.
#pragma once

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/env.h"

namespace scdino::testing {

class FaultInjectingEnv : public Env {
 public:
  enum class Op { kCreate, kAppend, kSync, kRename, kLink, kRemove, kCreateDirs };
  struct Fault {
    Op op = Op::kAppend;
    /// Only paths containing this (empty: every path).
    std::string path_contains;
    /// errno reported: ENOSPC (disk full), EACCES (permission), EIO, ...
    int err = ENOSPC;
    /// kAppend: bytes accepted (in all, per file) before the failure, so a
    /// partial write is left behind as on a real full disk.
    size_t after_bytes = 0;
    /// How many times it fires; -1: always.
    int times = -1;
  };

  void Inject(Fault f) {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.push_back(std::move(f));
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.clear();
  }
  /// How many calls failed because of a fault.
  int fired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }

  StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& path, int mode) override {
    if (auto f = Match(Op::kCreate, path)) return WriteError(f->err, "cannot create " + path + ": " + Why(*f));
    auto file = base_->NewExclusiveFile(path, mode);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(new File(this, path, std::move(file).value()));
  }
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    if (auto f = Match(Op::kCreate, path)) return Status::IOError("cannot open " + path + ": " + Why(*f));
    auto file = base_->NewAppendableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(new File(this, path, std::move(file).value()));
  }
  Status SyncPath(const std::string& path) override {
    if (auto f = Match(Op::kSync, path)) return WriteError(f->err, "fsync of " + path + " failed: " + Why(*f));
    return base_->SyncPath(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (auto f = Match(Op::kRename, to)) return WriteError(f->err, "cannot rename " + from + " to " + to + ": " + Why(*f));
    return base_->RenameFile(from, to);
  }
  Status LinkFile(const std::string& from, const std::string& to) override {
    if (auto f = Match(Op::kLink, to)) return Status::IOError("cannot link " + from + " to " + to + ": " + Why(*f));
    return base_->LinkFile(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    if (auto f = Match(Op::kRemove, path)) return Status::IOError("cannot remove " + path + ": " + Why(*f));
    return base_->RemoveFile(path);
  }
  Status RemoveTree(const std::string& path) override {
    if (auto f = Match(Op::kRemove, path)) return Status::IOError("cannot remove " + path + ": " + Why(*f));
    return base_->RemoveTree(path);
  }
  Status CreateDirs(const std::string& path) override {
    if (auto f = Match(Op::kCreateDirs, path)) {
      return Status::IOError("cannot create directory " + path + ": " + Why(*f));
    }
    return base_->CreateDirs(path);
  }
  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override { return base_->ListDir(dir); }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return base_->IsDirectory(path); }
  StatusOr<std::string> ReadFile(const std::string& path) override { return base_->ReadFile(path); }

 private:
  // Forwards to the real file; Append stops at the fault's byte budget.
  class File : public WritableFile {
   public:
    File(FaultInjectingEnv* env, std::string path, std::unique_ptr<WritableFile> real)
        : env_(env), path_(std::move(path)), real_(std::move(real)) {}
    Status Append(std::string_view data) override {
      if (auto f = env_->Peek(Op::kAppend, path_)) {
        const size_t room = f->after_bytes > written_ ? f->after_bytes - written_ : 0;
        if (data.size() > room) {
          (void)real_->Append(data.substr(0, room));
          written_ += room;
          env_->Consume(Op::kAppend, path_);
          return WriteError(f->err, "cannot write " + path_ + " after " + std::to_string(written_) + " bytes: " +
                                        std::strerror(f->err));
        }
      }
      written_ += data.size();
      return real_->Append(data);
    }
    Status Sync() override {
      if (auto f = env_->Match(Op::kSync, path_)) return WriteError(f->err, "fsync of " + path_ + " failed: " + Why(*f));
      return real_->Sync();
    }
    Status Close() override { return real_->Close(); }

   private:
    FaultInjectingEnv* env_;
    std::string path_;
    std::unique_ptr<WritableFile> real_;
    size_t written_ = 0;
  };

  static std::string Why(const Fault& f) { return std::strerror(f.err); }

  // The first fault for (op, path), without using it up.
  std::unique_ptr<Fault> Peek(Op op, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& f : faults_) {
      if (f.op == op && f.times != 0 && path.find(f.path_contains) != std::string::npos) {
        return std::make_unique<Fault>(f);
      }
    }
    return nullptr;
  }
  void Consume(Op op, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& f : faults_) {
      if (f.op == op && f.times != 0 && path.find(f.path_contains) != std::string::npos) {
        if (f.times > 0) --f.times;
        ++fired_;
        return;
      }
    }
  }
  std::unique_ptr<Fault> Match(Op op, const std::string& path) {
    auto f = Peek(op, path);
    if (f) Consume(op, path);
    return f;
  }

  Env* base_ = PosixEnv();
  mutable std::mutex mu_;
  std::vector<Fault> faults_;
  int fired_ = 0;
};

/// Installs a FaultInjectingEnv as Env::Default() for its lifetime.
class ScopedFaultEnv {
 public:
  ScopedFaultEnv() : previous_(Env::SetDefaultForTesting(&env_)) {}
  ~ScopedFaultEnv() { Env::SetDefaultForTesting(previous_ == PosixEnv() ? nullptr : previous_); }
  FaultInjectingEnv* operator->() { return &env_; }
  FaultInjectingEnv& env() { return env_; }

 private:
  FaultInjectingEnv env_;
  Env* previous_;
};

}  // namespace scdino::testing
