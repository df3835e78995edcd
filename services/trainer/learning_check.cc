#include "trainer/learning_check.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "eval/knn.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "features/feature_job.h"
#include "run/coordinator.h"

namespace scdino::trainer {
namespace {

constexpr int64_t kMaxTrain = 2000, kMaxTest = 1000, kK = 20;

// Up to `max` of `rows`, a seeded choice in data-set order.
std::vector<size_t> Sample(std::vector<size_t> rows, int64_t max, uint64_t seed) {
  if (static_cast<int64_t>(rows.size()) <= max) return rows;
  std::mt19937_64 rng(seed);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<size_t>(max));
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace

StatusOr<std::unique_ptr<LearningCheck>> LearningCheck::Make(const run::RunConfig& config, torch::Device device,
                                                             std::string* why_not) {
  if (config.scdino.data_source == "synthetic") {
    *why_not = "the synthetic source has no image files to hold out";
    return std::unique_ptr<LearningCheck>();
  }
  auto coordinator = run::Coordinator::Single();
  auto run = features::PrepareFeatureRun(config, config.source_path, run::LaunchInfo{}, *coordinator);
  if (!run.ok()) return run.status();
  // At the size the model trains on (what scdino-features uses when
  // resize_length is that size, as with recipe: auto and small-data.yaml):
  // a 224 px default on 48 px crops would cost 20 times more and measure
  // another model.
  run->prep.resize = config.train.hyperparameters.global_crops_size;
  const auto& entries = run->dataset.entries;
  if (run->dataset.classes.size() < 2) {
    *why_not = "the data set has one class (no labels to check against)";
    return std::unique_ptr<LearningCheck>();
  }
  std::vector<size_t> train, test;
  for (size_t i = 0; i < entries.size(); ++i) (run->splits[i] == data::Split::kTrain ? train : test).push_back(i);
  const auto seed = static_cast<uint64_t>(config.meta.seed);
  train = Sample(std::move(train), kMaxTrain, seed ^ 0x1ea4);
  test = Sample(std::move(test), kMaxTest, seed ^ 0x7e57);
  if (test.size() < 2 || train.size() < 2) {
    *why_not = "the held-out split has fewer than 2 images";
    return std::unique_ptr<LearningCheck>();
  }
  auto load = [&](const std::vector<size_t>& rows, torch::Tensor* x, torch::Tensor* y) -> Status {
    std::vector<torch::Tensor> images;
    std::vector<int64_t> labels;
    for (size_t i : rows) {
      auto img = features::LoadForModel(entries[i].path, run->prep);
      // A bad image the run skips (on_bad_image: skip) is left out here too.
      if (!img.ok()) {
        if (config.bad_image_policy() == data::BadImagePolicy::kSkip) continue;
        return img.status();
      }
      images.push_back(*img);
      labels.push_back(entries[i].label);
    }
    // On the CPU: moved to the device a batch at a time.
    *x = torch::stack(images);
    *y = torch::tensor(labels, torch::kInt64).to(device);
    return Status::Ok();
  };
  std::unique_ptr<LearningCheck> c(new LearningCheck());
  if (auto s = load(train, &c->train_x_, &c->train_y_); !s.ok()) return s;
  if (auto s = load(test, &c->test_x_, &c->test_y_); !s.ok()) return s;
  c->classes_ = static_cast<int64_t>(run->dataset.classes.size());
  c->device_ = device;
  c->vit_ = config.dino_options().vit;
  c->seed_ = seed;
  return c;
}

double LearningCheck::Top1(model::VisionTransformer vit) const {
  torch::NoGradGuard no_grad;
  const bool was_training = vit->is_training();
  vit->eval();
  auto features = [&](const torch::Tensor& x) {
    std::vector<torch::Tensor> out;
    for (int64_t at = 0; at < x.size(0); at += 64) {
      out.push_back(vit->forward(x.slice(0, at, std::min(x.size(0), at + 64)).to(device_)).to(torch::kFloat32));
    }
    return torch::nn::functional::normalize(torch::cat(out), torch::nn::functional::NormalizeFuncOptions().dim(1));
  };
  const auto train = features(train_x_), test = features(test_x_);
  if (was_training) vit->train();
  eval::KnnOptions o;
  o.ks = {kK};
  o.ranks = 1;
  const auto r = eval::WeightedKnn(train, train_y_, test, classes_, o);
  const auto top1 = r.ranked[0].select(1, 0);
  return top1.eq(test_y_).to(torch::kFloat64).mean().item<double>();
}

training::LearningReport LearningCheck::Measure(model::VisionTransformer teacher, int64_t epoch, int64_t iteration) {
  const auto t0 = std::chrono::steady_clock::now();
  if (random_top1_ < 0) {
    // scdino-features --random-init's baseline: the same shape and seed
    // (it reseeds the generator, which every training step seeds anew).
    auto random = features::RandomBackbone(vit_, seed_, device_);
    random_top1_ = Top1(random.vit);
  }
  training::LearningReport r;
  r.epoch = epoch;
  r.iteration = iteration;
  r.k = kK;
  r.train_images = train_y_.size(0);
  r.test_images = test_y_.size(0);
  r.classes = classes_;
  r.trained_top1 = Top1(teacher);
  r.random_top1 = random_top1_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace scdino::trainer
