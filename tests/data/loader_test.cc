#include "data/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "data/image_io.h"
#include "data/synthetic.h"
#include "support/test_support.h"

namespace scdino::data {
namespace {

// A class-folder TIFF set of synthetic cells.
Dataset Write(const std::string& root, int64_t classes, int64_t per_class) {
  SyntheticOptions o;
  o.classes = classes;
  o.per_class = per_class;
  o.channels = 3;
  o.size = 20;
  for (int64_t k = 0; k < classes; ++k) {
    std::filesystem::create_directories(root + "/k" + std::to_string(k));
    for (int64_t i = 0; i < per_class; ++i) {
      auto hwc = (SyntheticCell(o, k, i).permute({1, 2, 0}) * 255).round().to(torch::kUInt8);
      EXPECT_TRUE(WriteTiff(root + "/k" + std::to_string(k) + "/" + std::to_string(i) + ".tif", hwc).ok());
    }
  }
  auto d = IndexFolder(root);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return *d;
}

LoaderOptions Options(int threads, int64_t rank = 0, int64_t world = 1) {
  LoaderOptions o;
  o.sampler.batch_size = 4;
  o.sampler.rank = rank;
  o.sampler.world_size = world;
  o.sampler.seed = 11;
  o.crops.global_size = 16;
  o.crops.local_size = 8;
  o.crops.local_crops_number = 2;
  o.threads = threads;
  o.prefetch = 2;
  return o;
}

std::vector<MultiCropBatch> Epoch(FileLoader& l, int64_t epoch, int64_t first = 0) {
  l.StartEpoch(epoch, first);
  std::vector<MultiCropBatch> out;
  while (auto b = l.Next()) out.push_back(*b);
  return out;
}

TEST(FileLoader, SameBatchesForAnyThreadCountAndCache) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 9);
  FileLoader one(d, Options(1));
  auto o3 = Options(3);
  o3.cache = true;
  FileLoader three(d, o3);
  EXPECT_EQ(one.batches_per_epoch(), 4);  // 18 images, batches of 4, drop_last
  EXPECT_EQ(one.channels(), 3);
  for (int64_t epoch : {0, 1, 1}) {  // epoch 1 twice: the second from the cache
    auto a = Epoch(one, epoch), b = Epoch(three, epoch);
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].indices.equal(b[i].indices));
      for (size_t c = 0; c < a[i].crops.size(); ++c) EXPECT_TRUE(a[i].crops[c].equal(b[i].crops[c]));
      EXPECT_TRUE(torch::isfinite(a[i].crops[0]).all().item<bool>());
    }
  }
  // Resume inside an epoch gives the same remaining batches.
  auto full = Epoch(one, 2), rest = Epoch(one, 2, 3);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_TRUE(rest[0].crops[1].equal(full[3].crops[1]));
}

// The reading threads decode on one thread each and leave the process's
// intra-op count as the edge set it: a thread that computes after they ran
// (the training step's, on its first parallel call) gets that count. They
// used to lower it to 1 for the whole process (at::set_num_threads), and the
// CPU trainer computed on one thread whatever scdino.threads said.
TEST(FileLoader, TheReadingThreadsLeaveTheProcessThreadCountAlone) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 4);
  const int was = at::get_num_threads();
  at::set_num_threads(3);
  std::mutex mu;
  std::set<int> in_readers;
  auto o = Options(2);
  const auto caller = std::this_thread::get_id();  // reads the first image for its channel count
  o.read = [&](const std::string& path, const ImagePrep& prep) {
    std::lock_guard<std::mutex> l(mu);
    if (std::this_thread::get_id() != caller) in_readers.insert(at::get_num_threads());
    return LoadImage(path, prep);
  };
  {
    FileLoader l(d, o);
    EXPECT_EQ(Epoch(l, 0).size(), 2u);
  }
  int later = 0;
  std::thread([&] { later = at::get_num_threads(); }).join();
  at::set_num_threads(was);
  EXPECT_EQ(in_readers, std::set<int>{1});
  EXPECT_EQ(later, 3);
}

TEST(FileLoader, RanksShareNothing) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 8);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 2; ++r) {
    FileLoader l(d, Options(2, r, 2));
    for (const auto& b : Epoch(l, 0)) {
      for (int64_t i = 0; i < b.indices.size(0); ++i) EXPECT_TRUE(seen.insert(b.indices[i].item<int64_t>()).second);
    }
  }
  EXPECT_EQ(seen.size(), 16u);
}

TEST(FileLoader, BadImagesFailWithThePathOrAreSkippedWithoutNaN) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 6);
  const std::string broken = d.entries[3].path;
  std::ofstream(broken, std::ios::trunc) << "truncated";
  // A wrong channel count is bad input too.
  EXPECT_TRUE(WriteTiff(d.entries[7].path, torch::zeros({20, 20, 2}, torch::kUInt8)).ok());
  {
    FileLoader fail(d, Options(2));
    fail.StartEpoch(0, 0);
    try {
      while (fail.Next()) {
      }
      FAIL() << "expected an error";
    } catch (const StatusError& e) {
      const std::string m = e.status().message();
      EXPECT_TRUE(m.find(broken) != std::string::npos || m.find(d.entries[7].path) != std::string::npos) << m;
    }
  }
  auto o = Options(2);
  o.on_bad_image = BadImagePolicy::kSkip;
  FileLoader skip(d, o);
  int64_t images = 0;
  for (const auto& b : Epoch(skip, 0)) {
    images += b.indices.size(0);
    for (const auto& c : b.crops) EXPECT_TRUE(torch::isfinite(c).all().item<bool>());
    for (int64_t i = 0; i < b.indices.size(0); ++i) {
      EXPECT_NE(b.indices[i].item<int64_t>(), 3);
      EXPECT_NE(b.indices[i].item<int64_t>(), 7);
    }
  }
  EXPECT_EQ(skip.skipped_images(), 2);
  EXPECT_EQ(images, 12 - 2);
}

// A reading thread that throws (a decoder bug) or runs out of memory must
// not end the process (std::terminate): Next() reports it, naming the batch.
TEST(FileLoader, AFailingReadingThreadBecomesAnErrorOfNext) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 4);
  for (int kind = 0; kind < 2; ++kind) {
    auto o = Options(2);
    o.read = [kind](const std::string& path, const ImagePrep& prep) -> StatusOr<torch::Tensor> {
      if (path.find("/k1/2.tif") != std::string::npos) {
        if (kind == 0) throw std::runtime_error("decoder exploded");
        throw std::bad_alloc();
      }
      return LoadImage(path, prep);
    };
    FileLoader loader(d, o);
    loader.StartEpoch(0, 0);
    std::string error;
    try {
      while (loader.Next()) {
      }
    } catch (const StatusError& e) {
      error = e.status().message();
    }
    ASSERT_FALSE(error.empty()) << "the failure was not reported";
    EXPECT_NE(error.find(kind == 0 ? "decoder exploded" : "out of memory"), std::string::npos) << error;
    EXPECT_NE(error.find("batch"), std::string::npos) << error;
    if (kind == 1) {
      EXPECT_NE(error.find("scdino.cache_max_mb"), std::string::npos) << error;
    }
  }
}

// The device's allocator running out while a worker cuts crops on the GPU
// reaches Next() as the allocator's own error, which the trainer reports as
// out of memory naming the settings to lower (a generic error would not).
TEST(FileLoader, ADeviceOutOfMemoryOnAWorkerReachesNextAsItIs) {
  scdino::testing::ScratchDir dir;
  auto o = Options(2);
  o.read = [](const std::string& path, const ImagePrep& prep) -> StatusOr<torch::Tensor> {
    TORCH_CHECK_WITH(OutOfMemoryError, path.find("/k1/2.tif") == std::string::npos,
                     "CUDA out of memory. Tried to allocate 2.00 GiB");
    return LoadImage(path, prep);
  };
  FileLoader loader(Write(dir.path(), 2, 4), o);
  std::string error;
  try {
    Epoch(loader, 0);
  } catch (const c10::OutOfMemoryError& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    FAIL() << "expected c10::OutOfMemoryError, got: " << e.what();
  }
  EXPECT_NE(error.find("CUDA out of memory"), std::string::npos) << error;
}

// The image cache stops growing at its bound: the images it holds are read
// once, those beyond it again each epoch (the loader runs on into the next
// epoch, so counts beyond the first are not fixed), and the batches are
// those of a loader without a cache.
TEST(FileLoader, TheImageCacheIsBounded) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 4);
  std::mutex mu;
  std::map<std::string, int> reads;
  auto o = Options(1);
  o.cache = true;
  o.cache_max_bytes = 3 * 3 * 20 * 20 * 4;  // three images of 3 x 20 x 20 floats
  o.read = [&](const std::string& path, const ImagePrep& prep) {
    {
      std::lock_guard<std::mutex> l(mu);
      ++reads[path];
    }
    return LoadImage(path, prep);
  };
  FileLoader cached(d, o), plain(d, Options(1));
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto a = Epoch(cached, epoch), b = Epoch(plain, epoch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].crops[0].equal(b[i].crops[0])) << "epoch " << epoch;
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(reads.size(), 8u);
  int once = 0, again = 0;
  for (const auto& [path, n] : reads) (n == 1 ? once : again) += n >= 1;
  EXPECT_EQ(once, 3) << "the three images the bound holds are read once";
  EXPECT_EQ(again, 5) << "the five beyond it are read each epoch";
}

// The queue runs on across an epoch's end: the next epoch's first batches
// are read while the last ones of this epoch are taken, and they are the
// batches that epoch has when started afresh (a resume).
TEST(FileLoader, TheNextEpochsBatchesAreLoadedAheadAndAreThatEpochs) {
  scdino::testing::ScratchDir dir;
  auto d = Write(dir.path(), 2, 8);
  std::atomic<int> reads{0};
  auto o = Options(2);
  o.read = [&](const std::string& path, const ImagePrep& prep) {
    ++reads;
    return LoadImage(path, prep);
  };
  FileLoader ahead(d, o);
  ahead.StartEpoch(0, 0);
  std::vector<MultiCropBatch> first;
  while (auto b = ahead.Next()) first.push_back(*b);
  // The epoch is over; the workers go on into epoch 1 without a call.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (reads.load() < 16 + 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(reads.load(), 16 + 4) << "no batch of epoch 1 was loaded ahead";
  const auto second = Epoch(ahead, 1);
  FileLoader fresh(d, Options(2));
  const auto want = Epoch(fresh, 1);
  ASSERT_EQ(second.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(second[i].indices.equal(want[i].indices)) << "batch " << i;
    for (size_t c = 0; c < want[i].crops.size(); ++c) EXPECT_TRUE(second[i].crops[c].equal(want[i].crops[c]));
  }
}

}  // namespace
}  // namespace scdino::data
