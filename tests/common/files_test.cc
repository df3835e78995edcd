// The file-system layer: atomic replacement, exclusive no-follow creation,
// unique temporary names, cleaning of temporaries left by killed writers,
// and what a failure (disk full, permission, fsync, rename) leaves behind,
// produced with the fault-injecting Env.
#include "common/files.h"

#include <gtest/gtest.h>

#include <chrono>

#include <thread>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "support/fault_env.h"
#include "support/full_disk.h"
#include "support/test_support.h"

namespace scdino {
namespace {

using testing::FaultInjectingEnv;
using testing::ScopedFaultEnv;

int Entries(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(WriteFileAtomic, ReplacesContentAndLeavesNoTemporaries) {
  testing::ScratchDir dir;
  const std::string path = dir.file("out.json");
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(*ReadFile(path), "second");
  EXPECT_EQ(Entries(dir.path()), 1);
}

// The writer hands the kernel at most 1 MiB per write (common/env.cc): a
// file of five whole pieces and a partial sixth comes back byte for byte.
TEST(WriteFileAtomic, AFileOfManyWritePiecesReadsBackExactly) {
  testing::ScratchDir dir;
  const std::string path = dir.file("checkpoint.safetensors");
  std::string bytes((5 << 20) + 7, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + i / 4099) & 0xff);
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  EXPECT_EQ(std::filesystem::file_size(path), bytes.size());
  EXPECT_TRUE(*ReadFile(path) == bytes);
}

TEST(WriteFileAtomic, FailureKeepsThePreviousFileAndSaysWhy) {
  testing::ScratchDir dir;
  // The target is a non-empty directory: the rename must fail.
  const std::string path = dir.file("ckpt");
  std::filesystem::create_directories(path + "/inside");
  auto s = WriteFileAtomic(path, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_TRUE(std::filesystem::is_directory(path + "/inside"));
  EXPECT_EQ(Entries(dir.path()), 1) << "a temporary was left behind";
  // A missing directory is named too.
  auto m = WriteFileAtomic(dir.file("no/such/dir/file"), "x");
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.message().find("no/such/dir/file"), std::string::npos);
}

TEST(WriteFileAtomic, DiskFullLeavesThePreviousFileAndNoPartialTemporary) {
  testing::ScratchDir dir;
  const std::string path = dir.file("keep.txt");
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  ScopedFaultEnv env;
  env->Inject({FaultInjectingEnv::Op::kAppend, "keep.txt", ENOSPC, 1000});
  auto s = WriteFileAtomic(path, std::string(1 << 16, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("after 1000 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_EQ(env->fired(), 1);
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_EQ(Entries(dir.path()), 1) << "the partial temporary was left behind";
}

// last_healthy.safetensors is kept this way: a hard link where the file
// system allows, else a copy; a full disk is NoSpace (exit 8), the
// temporary is gone and the previous copy intact.
TEST(CopyFileAtomic, LinksOrCopiesAndAFullDiskKeepsThePreviousCopy) {
  testing::ScratchDir dir;
  const std::string from = dir.file("checkpoint.safetensors"), to = dir.file("last_healthy.safetensors");
  const std::string bytes(3 << 20, 'c');
  ASSERT_TRUE(WriteFileAtomic(from, bytes).ok());
  ASSERT_TRUE(CopyFileAtomic(from, to).ok());
  EXPECT_EQ(*ReadFile(to), bytes);
  EXPECT_EQ(std::filesystem::hard_link_count(to), 2u) << "a link, not a copy";
  ASSERT_TRUE(WriteFileAtomic(from, "newer").ok());  // replaced by a rename: the kept copy stays
  EXPECT_EQ(*ReadFile(to), bytes);
  {
    ScopedFaultEnv env;  // no links here, and the disk fills after 1000 bytes
    env->Inject({FaultInjectingEnv::Op::kLink, "last_healthy", EXDEV});
    env->Inject({FaultInjectingEnv::Op::kAppend, "last_healthy", ENOSPC, 1000});
    ASSERT_TRUE(WriteFileAtomic(from, bytes + "x").ok());
    Status s = CopyFileAtomic(from, to);
    EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
    EXPECT_NE(s.message().find(to), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(from), std::string::npos) << s.message();
  }
  EXPECT_EQ(*ReadFile(to), bytes);
  EXPECT_EQ(Entries(dir.path()), 2) << "a temporary was left behind";

  // A real full disk: the kept copy on a 256 KiB tmpfs, across a mount (so
  // no link), the checkpoint 3 MiB.
  const std::string mount = dir.file("small");
  std::filesystem::create_directories(mount);
  std::string why;
  auto full = testing::OnAFullDisk(mount, 256, [&] {
    const std::string kept = mount + "/last_healthy.safetensors";
    if (Status s = WriteFileAtomic(kept, "previous"); !s.ok()) return s;
    Status s = CopyFileAtomic(from, kept);
    if (s.ok()) return Status::Internal("copied 3 MiB onto a 256 KiB disk");
    if (*ReadFile(kept) != "previous") return Status::Internal("the previous copy changed");
    if (Entries(mount) != 1) return Status::Internal("a temporary was left behind");
    return s;
  }, &why);
  if (!full) GTEST_SKIP() << why;
  EXPECT_EQ(full->code(), StatusCode::kNoSpace) << full->ToString();
  EXPECT_NE(full->message().find("No space left on device"), std::string::npos) << full->message();
}

// A rename needs space too where a directory takes blocks (ext4, XFS,
// Lustre): a new name in a full directory block on a full disk fails
// ENOSPC, which is NoSpace (exit 8: the disk is the cure), as a full write
// is, naming both paths; the temporary is still there.
TEST(Env, ARenameOnAFullDiskIsNoSpace) {
  testing::ScratchDir dir;
  const std::string mount = dir.file("small");
  std::filesystem::create_directories(mount);
  std::string why;
  std::string to;
  auto full = testing::OnAFullDisk(mount, 512, [&]() -> Status {
    const std::string run = mount + "/run", from = run + "/.checkpoint.tmp";
    std::filesystem::create_directories(run);
    std::ofstream(from) << "weights";
    // The directory's one block nearly full: four entries of 200 characters.
    for (int i = 0; i < 4; ++i) std::ofstream(run + "/" + std::string(200, static_cast<char>('a' + i)));
    // Every block taken, one at a time.
    const int fill = ::open((mount + "/fill").c_str(), O_WRONLY | O_CREAT, 0600);
    const std::string block(1024, 'x');
    while (::write(fill, block.data(), block.size()) > 0) {
    }
    ::fsync(fill);
    ::close(fill);
    to = run + "/" + std::string(240, 'z');
    Status s = Env::Default()->RenameFile(from, to);
    if (s.ok()) return Status::Internal("renamed on a full disk: the test's premise failed");
    if (!std::filesystem::exists(from)) return Status::Internal("the temporary is gone");
    return s;
  }, &why, "ext4");
  if (!full) GTEST_SKIP() << why;
  EXPECT_EQ(full->code(), StatusCode::kNoSpace) << full->ToString();
  EXPECT_NE(full->message().find("No space left on device"), std::string::npos) << full->message();
  EXPECT_NE(full->message().find(".checkpoint.tmp"), std::string::npos) << full->message();
  EXPECT_NE(full->message().find(std::string(240, 'z')), std::string::npos) << full->message();
}

TEST(WriteFileAtomic, PermissionFsyncAndRenameFailuresKeepThePreviousFile) {
  testing::ScratchDir dir;
  const std::string path = dir.file("state.json");
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  for (auto op : {FaultInjectingEnv::Op::kCreate, FaultInjectingEnv::Op::kSync, FaultInjectingEnv::Op::kRename}) {
    ScopedFaultEnv env;
    env->Inject({op, "state.json", EACCES, 0, 1});
    auto s = WriteFileAtomic(path, "new");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("Permission denied"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("previous file, if any, is unchanged"), std::string::npos) << s.message();
    EXPECT_EQ(*ReadFile(path), "old");
    EXPECT_EQ(Entries(dir.path()), 1);
  }
}

// O_CREAT | O_EXCL | O_NOFOLLOW: a file or symlink planted at a name is never
// written through (the old writer followed a symlink at its predictable
// temporary name).
TEST(Env, ExclusiveCreationNeverWritesThroughAPlantedFileOrSymlink) {
  testing::ScratchDir dir;
  const std::string victim = dir.file("victim");
  {
    std::ofstream(victim) << "precious";
  }
  const std::string link = dir.file("link");
  std::filesystem::create_symlink(victim, link);
  auto f = Env::Default()->NewExclusiveFile(link, 0644);
  ASSERT_FALSE(f.ok());
  auto g = Env::Default()->NewExclusiveFile(victim, 0644);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kAlreadyExists);
  auto a = Env::Default()->NewAppendableFile(link);
  ASSERT_FALSE(a.ok()) << "appending followed a symlink";
  EXPECT_EQ(*ReadFile(victim), "precious");
}

TEST(Env, TemporaryNamesAreHiddenUniqueAndNameTheirWriter) {
  std::set<std::string> names;
  for (int i = 0; i < 1000; ++i) names.insert(TempPathFor("/run/dir/checkpoint.safetensors"));
  EXPECT_EQ(names.size(), 1000u);
  const std::string one = *names.begin();
  const std::string base = std::filesystem::path(one).filename().string();
  EXPECT_EQ(std::filesystem::path(one).parent_path(), "/run/dir");
  EXPECT_EQ(base.rfind(".checkpoint.safetensors.tmp~", 0), 0u) << base;
  EXPECT_NE(base.find("~" + std::to_string(::getpid()) + "~"), std::string::npos) << base;
  EXPECT_TRUE(IsTemporaryName(base));
  EXPECT_FALSE(IsTemporaryName("checkpoint.safetensors"));
  EXPECT_FALSE(IsTemporaryName(".hidden.tmp"));
}

// A temporary name as a writer with `pid` on `host` would have made it.
std::string TempNameOf(const std::string& target, const std::string& host, int64_t pid) {
  std::vector<std::string> f;
  std::stringstream ss(std::filesystem::path(TempPathFor(target)).filename().string());
  for (std::string part; std::getline(ss, part, '~');) f.push_back(part);
  return f[0] + "~" + (host.empty() ? f[1] : host) + "~" + f[2] + "~" + std::to_string(pid) + "~" + f[4];
}

TEST(Env, CleaningRemovesOnlyTemporariesOfWritersThatAreGone) {
  testing::ScratchDir dir;
  std::filesystem::create_directories(dir.file("features/ckpt/shards"));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = dir.file(TempNameOf("checkpoint.safetensors", "", child));
  const std::string deep = dir.file("features/ckpt/shards/" + TempNameOf("shard.npy", "", child));
  const std::string alive = dir.file(TempNameOf("log.jsonl", "", ::getpid()));
  const std::string other_host = dir.file(TempNameOf("x.json", "another-node", child));
  const std::string kept = dir.file("checkpoint.safetensors");
  for (const auto& p : {dead, deep, alive, other_host, kept}) std::ofstream(p) << "x";
  EXPECT_EQ(CleanStaleTemporaries(dir.path(), /*recursive=*/false), 1);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(deep));
  EXPECT_EQ(CleanStaleTemporaries(dir.path(), /*recursive=*/true), 1);
  EXPECT_FALSE(std::filesystem::exists(deep));
  EXPECT_TRUE(std::filesystem::exists(alive)) << "a live writer's temporary was removed";
  EXPECT_TRUE(std::filesystem::exists(other_host)) << "another node's temporary was removed";
  EXPECT_TRUE(std::filesystem::exists(kept));
  EXPECT_EQ(CleanStaleTemporaries(dir.file("missing"), true), 0);
  // A process holding the run directory (launch/run_lock.h) also removes
  // other nodes' temporaries last written before its cutoff: their writers
  // belonged to an earlier attempt (killed with a lost node). A recent one
  // is a live writer's, and stays.
  const std::string old_other = dir.file(TempNameOf("y.json", "lost-node", 4242));
  std::ofstream(old_other) << "x";
  std::filesystem::last_write_time(old_other, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const auto cutoff = std::filesystem::file_time_type::clock::now() - std::chrono::minutes(5);
  EXPECT_EQ(CleanStaleTemporaries(dir.path(), false, Env::Default(), cutoff), 1);
  EXPECT_FALSE(std::filesystem::exists(old_other)) << "an earlier attempt's temporary on another node stayed";
  EXPECT_TRUE(std::filesystem::exists(other_host)) << "a recent temporary of another node was removed";
  EXPECT_TRUE(std::filesystem::exists(alive));
}

// A file another node wrote, not yet visible here (NFS's caches lag): read
// again after each wait, said once, and found when it appears. Never
// appearing, it is the reader's NotFound, saying how long it was waited
// for; another failure is returned at once.
TEST(RetryWhileFileLags, AFileThatAppearsLateIsReadAndOneThatNeverDoesIsNamed) {
  testing::ScratchDir dir;
  const std::string path = dir.file("checkpoint.safetensors");
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(450));
    ASSERT_TRUE(WriteFileAtomic(path, "late").ok());
  });
  const std::vector<std::chrono::milliseconds> waits(8, std::chrono::milliseconds(100));
  std::ostringstream said;
  int tries = 0;
  const Status found = RetryWhileFileLags([&] { ++tries; return ReadFile(path).status(); }, "resume", &said, waits);
  writer.join();
  EXPECT_TRUE(found.ok()) << found.ToString();
  EXPECT_GE(tries, 4);
  EXPECT_NE(said.str().find("scdino: resume: no such file: " + path + "; a shared file system may show it late"),
            std::string::npos)
      << said.str();
  const Status never = RetryWhileFileLags([&] { return ReadFile(dir.file("never")).status(); }, "resume", nullptr, waits);
  EXPECT_EQ(never.code(), StatusCode::kNotFound);
  EXPECT_NE(never.message().find("(still so after 800 ms of waiting"), std::string::npos) << never.message();
  tries = 0;
  const Status other = RetryWhileFileLags([&] { ++tries; return Status::IOError("disk gone"); }, "resume", nullptr, waits);
  EXPECT_EQ(other.code(), StatusCode::kIOError);
  EXPECT_EQ(tries, 1);
}

TEST(AtomicFile, WithoutCommitTheTemporaryIsRemoved) {
  testing::ScratchDir dir;
  {
    AtomicFile f(dir.file("a.h5ad"));
    ASSERT_TRUE(f.Create(0644, /*open=*/false).ok());
    EXPECT_TRUE(std::filesystem::exists(f.path()));
  }
  EXPECT_EQ(Entries(dir.path()), 0);
  AtomicFile g(dir.file("b.bin"));
  ASSERT_TRUE(g.Create().ok());
  ASSERT_TRUE(g.file()->Append("bytes").ok());
  ASSERT_TRUE(g.Commit().ok());
  EXPECT_EQ(*ReadFile(dir.file("b.bin")), "bytes");
  EXPECT_EQ(Entries(dir.path()), 1);
}

}  // namespace
}  // namespace scdino
