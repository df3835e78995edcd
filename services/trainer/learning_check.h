// The trainer's learning check (scdino.learning_check: auto): whether the
// teacher's features separate the data set's classes better than a random
// ViT's, measured while training, so that a run that made its model worse
// than not training it says so (docs/training.md, "Did it learn?"). The
// held-out images of scdino-features' seeded split (up to 1,000, with up to
// 2,000 of the train split as neighbours) are read once, prepared as
// scdino-features prepares them, at the global crop size; each check is one
// forward pass over them and a weighted 20-NN vote (eval/knn.h), the random
// ViT's once per run.
// Rank 0 only; not thread-safe.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "model/vit.h"
#include "run/config.h"
#include "training/reports.h"

namespace scdino::trainer {

class LearningCheck {
 public:
  /// Null, with the reason in `why_not`, where there is nothing to check
  /// against: no labels (one class), a synthetic source, or fewer than 2
  /// test images. Errors are the data set's (unreadable images, statistics).
  static StatusOr<std::unique_ptr<LearningCheck>> Make(const run::RunConfig& config, torch::Device device,
                                                       std::string* why_not);

  /// The check of `teacher` (put back in training mode after).
  training::LearningReport Measure(model::VisionTransformer teacher, int64_t epoch, int64_t iteration);

  int64_t test_images() const { return test_y_.size(0); }

 private:
  LearningCheck() = default;
  double Top1(model::VisionTransformer vit) const;

  torch::Tensor train_x_, train_y_, test_x_, test_y_;
  int64_t classes_ = 0;
  torch::Device device_ = torch::kCPU;
  model::VitOptions vit_;
  uint64_t seed_ = 0;
  double random_top1_ = -1.0;  ///< measured at the first check
};

}  // namespace scdino::trainer
