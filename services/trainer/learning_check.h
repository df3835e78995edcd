// The trainer's learning check (scdino.learning_check: auto): whether the
// teacher's features separate the data set's classes better than the two
// baselines that need no training, a random ViT's features and the raw
// pixels (features/backbone.h, PixelFeatures), measured while training, so
// that a run that made its model worth less than not training it says so
// (docs/training.md, "Did it learn?"). The
// held-out images of scdino-features' seeded split (up to 1,000, with up to
// 2,000 of the train split as neighbours, as many as
// scdino.learning_check_mb holds) are read once by a thread of their own
// while training starts, prepared as scdino-features prepares them, at the
// global crop size; each check is one forward pass over them and a weighted
// 20-NN vote (eval/knn.h), the baselines' once per run.
// Rank 0 only; Measure from one thread.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "data/dataset.h"
#include "model/vit.h"
#include "config/config.h"
#include "training/reports.h"

namespace scdino::trainer {

class LearningCheck {
 public:
  /// Null, with the reason in `why_not`, where there is nothing to check
  /// against: no labels (one class), a synthetic source, fewer than 2 test
  /// images, or a bound that holds fewer than 6 images. Errors are the data
  /// set's (its statistics). Starts loading the images of `dataset` (the
  /// run's index, run::IndexDataset), read by index.
  static StatusOr<std::unique_ptr<LearningCheck>> Make(const run::RunConfig& config, const data::Dataset& dataset,
                                                       torch::Device device, std::string* why_not);
  /// Stops the loading (within one image) and waits for it.
  ~LearningCheck();

  /// The check of `teacher` (put back in training mode after). Nullopt, with
  /// a line on stderr, when the images are not loaded within a third of
  /// scdino.distributed_timeout_s (the other ranks wait in the next
  /// collective) or could not be read.
  std::optional<training::LearningReport> Measure(model::VisionTransformer teacher, int64_t epoch,
                                                  int64_t iteration);

  /// Whether the images are loaded (or their loading failed) within `wait`.
  bool WaitLoaded(std::chrono::milliseconds wait);
  /// Once loaded: the images checked against, and the neighbours.
  int64_t test_images() const { return test_y_.defined() ? test_y_.size(0) : 0; }
  int64_t train_images() const { return train_y_.defined() ? train_y_.size(0) : 0; }

 private:
  LearningCheck() = default;
  struct LoadJob;
  void Load(LoadJob job);
  /// The 20-NN top-1 of the test images' features against the train
  /// images' (both L2-normalised by it).
  double Top1(const std::function<torch::Tensor(const torch::Tensor&)>& features) const;
  double Top1(model::VisionTransformer vit) const;

  std::thread loader_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool loaded_ = false, said_why_ = false;
  Status load_status_;
  std::chrono::seconds wait_{100};
  torch::Tensor train_x_, train_y_, test_x_, test_y_;
  int64_t classes_ = 0;
  torch::Device device_ = torch::kCPU;
  model::VitOptions vit_;
  uint64_t seed_ = 0;
  double margin_ = 0.0;        ///< scdino.learning_margin
  double random_top1_ = -1.0;  ///< measured at the first check
  double pixels_top1_ = -1.0;  ///< measured at the first check
};

}  // namespace scdino::trainer
