#include "common/files.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "support/test_support.h"

namespace scdino {
namespace {

TEST(WriteFileAtomic, ReplacesContentAndLeavesNoTemporaries) {
  testing::ScratchDir dir;
  const std::string path = dir.file("out.json");
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(*ReadFile(path), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
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
  // A missing directory is named too.
  auto m = WriteFileAtomic(dir.file("no/such/dir/file"), "x");
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.message().find("no/such/dir/file"), std::string::npos);
}

TEST(WriteFileAtomic, DiskFullKeepsThePreviousFile) {
  // /dev/full fails every write with ENOSPC: the error names the reason and
  // the destination keeps its old content.
  testing::ScratchDir dir;
  const std::string path = dir.file("keep.txt");
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  std::filesystem::create_symlink("/dev/full", path + ".tmp." + std::to_string(::getpid()));
  auto s = WriteFileAtomic(path, std::string(1 << 16, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_EQ(*ReadFile(path), "old");
}

}  // namespace
}  // namespace scdino
