#include "common/parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace scdino {
namespace {

// The process's intra-op count set to 3 (as run::ConfigureCpu sets it at a
// service's start), restored afterwards.
class ProcessThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    was_ = at::get_num_threads();
    at::set_num_threads(3);
  }
  void TearDown() override { at::set_num_threads(was_); }

 private:
  int was_ = 1;
};

// Chunks ParallelFor cuts [0, 300) into on the calling thread.
int Chunks() {
  std::atomic<int> chunks{0};
  ParallelFor(0, 300, 1, [&](int64_t, int64_t) { ++chunks; });
  return chunks.load();
}

// A thread beside the compute (a loader's reader) runs its own work on
// itself alone, and a thread that starts computing after it (the training
// step's, on its first parallel call) still gets the process's count:
// at::set_num_threads(1) in the reader gave every later thread 1.
TEST_F(ProcessThreads, SerialOnThisThreadLeavesTheProcessCountAlone) {
  int reader_threads = 0, reader_chunks = 0;
  std::thread([&] {
    SerialOnThisThread();
    reader_threads = at::get_num_threads();
    reader_chunks = Chunks();
  }).join();
  EXPECT_EQ(reader_threads, 1);
  EXPECT_EQ(reader_chunks, 1);
  int later_threads = 0, later_chunks = 0;
  std::thread([&] {
    later_threads = at::get_num_threads();
    later_chunks = Chunks();
  }).join();
  EXPECT_EQ(later_threads, 3);
  EXPECT_EQ(later_chunks, 3);
}

}  // namespace
}  // namespace scdino
