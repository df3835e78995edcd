// The file loader: a MultiCropSource over an indexed data set. Background
// threads read, decode and preprocess (channel selection, center crop,
// min-max) the images of upcoming batches into a bounded prefetch queue,
// optionally keeping decoded images in memory, and cut each batch's
// multi-crop views beside the training step: on the CPU, or for a GPU on a
// side stream of their own, the images uploaded from page-locked memory
// (float16 where the run trains in reduced precision: half the bytes) and
// converted on the device; the step's stream waits for the crops on the
// device, never the host (data/stream_handoff.h). The queue runs on across
// an epoch's end: the next epoch's first batches are loaded while the last
// ones train.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "data/block_cache.h"
#include "data/dataset.h"
#include "data/multicrop.h"
#include "data/packed.h"
#include "data/sampler.h"
#include "data/batch_source.h"
#include "data/stream_handoff.h"

namespace scdino::data {

struct LoaderOptions {
  ImagePrep prep;
  SamplerOptions sampler;   ///< dataset_size is filled from the data set
  MultiCropOptions crops;
  int threads = 2;          ///< reading and decoding threads
  int prefetch = 4;         ///< batches decoded ahead
  bool cache = false;       ///< keep decoded, preprocessed images in memory
  /// Bytes the cache may hold; images beyond it are decoded again each
  /// epoch rather than exhausting the node's memory.
  int64_t cache_max_bytes = int64_t{8192} << 20;
  BadImagePolicy on_bad_image = BadImagePolicy::kFail;
  /// How a file becomes an image (LoadImage); replaced by tests to make a
  /// reading thread fail the ways real ones do (an exception, no memory).
  std::function<StatusOr<torch::Tensor>(const std::string& path, const ImagePrep& prep)> read = LoadImage;
  /// Bytes the blocks of a packed data set (Dataset::packed) may hold:
  /// with a block shuffle (sampler.block = its block_samples,
  /// sampler.storage_order = its pack_order) images are read a whole block
  /// at a time, the blocks of the current and next windows kept in memory. The windows the batches in flight reach
  /// grow with the ranks (a global batch spans them all) and the image
  /// size: when their blocks would need more, the images are read one at a
  /// time instead (the same order; more, smaller reads). read_plan() says
  /// which, with the figures.
  int64_t block_cache_max_bytes = int64_t{2048} << 20;
  /// What the images travel to a GPU as: float32, or float16 (half the
  /// bytes; 11 significant bits, for runs whose model computes in bf16 or
  /// fp16 anyway). Ignored on the CPU.
  torch::ScalarType upload_dtype = torch::kFloat32;
  /// The streams the workers cut crops on and the step waits on
  /// (data/stream_handoff.h); null: the device's own (DeviceStreams()).
  std::shared_ptr<StreamProvider> streams;
};

/// Thread-safe towards its own workers; Next() and StartEpoch() are called
/// from one thread. Its parts: the prefetch pipeline (the workers and the
/// batches they load, here), the decoded images kept (ImageCache) and a
/// packed set's blocks held (BlockCache).
class FileLoader : public MultiCropSource {
 public:
  FileLoader(Dataset dataset, LoaderOptions options, torch::Device device = torch::kCPU);
  ~FileLoader() override;

  int64_t channels() const override { return channels_; }
  int64_t batches_per_epoch() const override { return sampler_.batches_per_epoch(); }
  int64_t dataset_size() const override { return static_cast<int64_t>(dataset_.entries.size()); }
  int64_t batch_size() const override { return options_.sampler.batch_size; }
  void StartEpoch(int64_t epoch, EpochStart start) override;
  EpochStart ResumeAt(int64_t position) const override { return sampler_.ResumeAt(position); }
  /// Throws StatusError for a bad image under kFail (file and reason), and
  /// for a failure of a worker thread (e.g. host memory), naming it; a
  /// device's out-of-memory error (c10::OutOfMemoryError) as it is, which
  /// the trainer reports with the settings to lower.
  std::optional<MultiCropBatch> Next() override;
  std::vector<std::string> class_names() const override { return dataset_.classes; }
  std::string epoch_order() const override;

  /// Seconds Next() has spent blocked on decoding so far (part of its wall
  /// time; the trainer times Next() as a whole): for benchmarks.
  double queue_wait_seconds() const { return queue_wait_seconds_; }
  /// Images left out under kSkip of the batches taken so far.
  int64_t skipped_images() const { return skipped_count_.load(); }
  const Dataset& dataset() const { return dataset_; }
  /// How a packed set is read: in blocks, with the most bytes they may hold,
  /// or image by image and why; "" for image files.
  const std::string& read_plan() const { return read_plan_; }
  /// The most bytes the blocks held may take (0: no blocks held).
  int64_t block_cache_bytes() const { return blocks_ ? blocks_->max_bytes() : 0; }

 private:
  struct RawBatch {
    torch::Tensor images;  // [b, C, Hmax, Wmax] padded
    std::vector<std::array<int64_t, 2>> sizes;
    std::vector<int64_t> indices;
    StreamHandoff crops;   // cut by the worker, on the device
    int64_t skipped = 0;   // bad images left out (kSkip)
    Status error;
    std::exception_ptr device_oom;  // a c10::OutOfMemoryError, rethrown by Next()
  };
  void Worker(int worker);
  void StopWorkers();
  RawBatch Load(const std::vector<int64_t>& indices);
  StatusOr<torch::Tensor> LoadOne(int64_t index);
  /// Says a bad image skipped under kSkip, once per file.
  void NoteSkipped(const Status& why, const std::string& path);

  // Constant after construction.
  Dataset dataset_;
  LoaderOptions options_;
  EpochSampler sampler_;
  MultiCropAugmenter augmenter_;
  torch::Device device_;
  std::shared_ptr<StreamProvider> streams_;
  int64_t channels_ = 0;
  std::string read_plan_;

  // The parts the workers share, each thread-safe: null when not used.
  std::unique_ptr<ImageCache> images_;   // options_.cache
  std::unique_ptr<BlockCache> blocks_;   // a packed set read in blocks

  // The prefetch pipeline. Batches are keyed by epoch x batches_per_epoch
  // + batch, so that the workers run on into the next epoch (its order
  // from the sampler, as StartEpoch(epoch + 1) at its start would have it).
  std::mutex mu_;
  std::condition_variable cv_;  // a batch is ready, taken, or the order changed
  // Guarded by mu_: the current epoch's order and the next's; where the
  // workers load and Next takes; the batches loaded; a generation that
  // drops batches loaded for an old order.
  std::map<int64_t, std::vector<int64_t>> epoch_indices_;
  int64_t epoch_ = 0, next_to_load_ = 0, next_to_take_ = 0, generation_ = 0;
  bool started_ = false;
  bool stopping_ = false;
  std::map<int64_t, RawBatch> ready_;
  // The calling thread's (StartEpoch, Next, the destructor).
  std::vector<std::thread> workers_;
  double queue_wait_seconds_ = 0.0;

  std::atomic<int64_t> skipped_count_{0};
  std::mutex bad_mu_;
  std::set<std::string> logged_bad_;  // guarded by bad_mu_
};

}  // namespace scdino::data
