// Which streams the crops are cut on and waited on (data/stream_handoff.h),
// seen through a provider that records what it is asked: on the CPU the
// hand-off's calls are plain, but the choices are the ones a GPU run makes.
#include "data/stream_handoff.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "data/loader.h"
#include "support/cell_folders.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

class RecordingStreams : public StreamProvider {
 public:
  c10::Stream SideStream(torch::Device device, int worker) override {
    std::lock_guard<std::mutex> l(mu);
    side.insert({device.str(), worker});
    ++side_calls;
    return c10::Stream(c10::Stream::UNSAFE, torch::kCPU, static_cast<c10::StreamId>(1 + worker));
  }
  c10::Stream CurrentStream(torch::Device device) override {
    std::lock_guard<std::mutex> l(mu);
    current.insert(device.str());
    return c10::Stream(c10::Stream::DEFAULT, torch::kCPU);
  }
  std::mutex mu;
  std::set<std::pair<std::string, int>> side;
  std::set<std::string> current;
  int side_calls = 0;
};

// The receiver waits on the current stream of the device the tensors were
// made on (here GPU 1), not on whichever device is current on its thread.
TEST(StreamHandoff, TheReceiverWaitsOnTheStreamOfTheTensorsDevice) {
  RecordingStreams streams;
  const torch::Device gpu1(torch::kCUDA, 1);
  auto h = StreamHandoff::Make(gpu1, 3, streams, [] { return std::vector<torch::Tensor>{torch::ones({2})}; });
  const auto got = h.Take(streams);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].equal(torch::ones({2})));
  EXPECT_EQ(streams.side, (std::set<std::pair<std::string, int>>{{"cuda:1", 3}}));
  EXPECT_EQ(streams.current, (std::set<std::string>{"cuda:1"}));
}

// Over many batches and epochs the loader's workers ask for their own side
// stream each (worker 0 and 1), never one per batch: the caching allocator
// keeps freed blocks per stream, and a stream per batch grows its reserve.
TEST(StreamHandoff, EachLoaderWorkerCutsOnOneSideStreamForEveryBatch) {
  scdino::testing::ScratchDir dir;
  SyntheticOptions so;
  so.classes = 2;
  so.per_class = 8;
  so.channels = 2;
  so.size = 16;
  scdino::testing::WriteCellFolders(dir.path(), so, "k");
  auto d = IndexFolder(dir.path());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto streams = std::make_shared<RecordingStreams>();
  LoaderOptions o;
  o.sampler.batch_size = 2;
  o.sampler.seed = 3;
  o.crops.global_size = 8;
  o.crops.local_size = 4;
  o.crops.local_crops_number = 1;
  o.threads = 2;
  o.prefetch = 2;
  o.streams = streams;
  int64_t batches = 0;
  {
    FileLoader loader(*d, o);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      loader.StartEpoch(epoch, 0);
      while (loader.Next()) ++batches;
    }
  }
  EXPECT_EQ(batches, 3 * 8);
  std::lock_guard<std::mutex> l(streams->mu);
  EXPECT_GE(streams->side_calls, batches);
  for (const auto& [device, worker] : streams->side) {
    EXPECT_EQ(device, "cpu");
    EXPECT_TRUE(worker == 0 || worker == 1) << "worker " << worker;
  }
  EXPECT_LE(streams->side.size(), 2u);
  EXPECT_EQ(streams->current, (std::set<std::string>{"cpu"}));
}

}  // namespace
}  // namespace scdino::data
