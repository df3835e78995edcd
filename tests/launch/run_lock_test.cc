#include "launch/run_lock.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/files.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

LaunchInfo Slurm(int64_t job, int64_t rank = 0, int64_t restart = 0) {
  LaunchInfo l;
  l.source = "slurm";
  l.rank = rank;
  l.world_size = 2;
  l.attempt = "slurm job " + std::to_string(job) + " step 0 restart " + std::to_string(restart) + " at n1:20001";
  return l;
}

// One world writes a run directory at a time: a second one (another job
// given the same config, or one-rank runs made by a leaked RANK) is refused
// naming the holder and what to change; ranks other than 0 take nothing;
// the lock ends with its holder.
TEST(RunDirLock, ASecondWorldIsRefusedNamingTheHolder) {
  scdino::testing::ScratchDir dir;
  auto first = LockRunDir(dir.path(), "trainer", Slurm(101));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->held());
  EXPECT_NE(ReadFile(dir.file("trainer.lock"))->find("world=slurm job 101; attempt=slurm job 101 step 0 restart 0"),
            std::string::npos);
  auto other = LockRunDir(dir.path(), "trainer", Slurm(202));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(other.status().message().find(dir.path() + " is in use: " + dir.file("trainer.lock") + " is held by host="),
            std::string::npos)
      << other.status().message();
  EXPECT_NE(other.status().message().find("world=slurm job 101"), std::string::npos);
  EXPECT_NE(other.status().message().find("this is slurm job 202"), std::string::npos);
  EXPECT_NE(other.status().message().find("meta.name_of_run"), std::string::npos);
  LaunchInfo single;
  EXPECT_FALSE(LockRunDir(dir.path(), "trainer", single).ok()) << "a single process is a world of its own";
  auto rank1 = LockRunDir(dir.path(), "trainer", Slurm(202, 1));
  ASSERT_TRUE(rank1.ok());
  EXPECT_FALSE(rank1->held());
  auto features = LockRunDir(dir.path(), "features", Slurm(202));
  ASSERT_TRUE(features.ok()) << "another service's lock is its own";
  *first = RunDirLock();  // the holder ends
  auto after = LockRunDir(dir.path(), "trainer", Slurm(202));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(after->held());
}

// An earlier attempt of the same job still holding the lock (a lost node
// whose NFS lease has not expired) is waited for; past the wait, the
// attempt ends as a lost peer, which the batch scripts requeue, never as
// bad input.
TEST(RunDirLock, AnEarlierAttemptOfTheSameJobIsWaitedForThenRequeued) {
  scdino::testing::ScratchDir dir;
  auto earlier = LockRunDir(dir.path(), "trainer", Slurm(303, 0, 0));
  ASSERT_TRUE(earlier.ok());
  std::ostringstream said;
  const auto start = std::chrono::steady_clock::now();
  auto again = LockRunDir(dir.path(), "trainer", Slurm(303, 0, 1), std::chrono::seconds(2), &said);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kPeerLost);
  EXPECT_NE(again.status().message().find("still held by an earlier attempt of slurm job 303"), std::string::npos)
      << again.status().message();
  EXPECT_GE(waited, std::chrono::seconds(2));
  EXPECT_NE(said.str().find("waiting up to 2 s"), std::string::npos) << said.str();
}

}  // namespace
}  // namespace scdino::run
