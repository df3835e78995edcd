#include "trainer/learning_check.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include "common/progress.h"
#include "eval/knn.h"
#include "features/backbone.h"
#include "features/extractor.h"
#include "jobs/feature_job.h"
#include "launch/coordinator.h"

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

// What the loader thread reads (LearningCheck::Load).
struct LearningCheck::LoadJob {
  features::FeaturePrep prep;
  bool skip = false;  ///< on_bad_image: skip
  std::shared_ptr<const data::Dataset> data;
  std::vector<size_t> train, test;
  int64_t images = 0;
};

StatusOr<std::unique_ptr<LearningCheck>> LearningCheck::Make(const run::RunConfig& config,
                                                             const data::Dataset& dataset, torch::Device device,
                                                             std::string* why_not) {
  if (config.scdino.data_source == "synthetic") {
    *why_not = "the synthetic source has no image files to hold out";
    return std::unique_ptr<LearningCheck>();
  }
  auto coordinator = run::Coordinator::Single();
  // At the size the model trains on (what scdino-features uses when
  // resize_length is that size, as with recipe: auto and small-data.yaml):
  // a 224 px default on 48 px crops would cost 20 times more and measure
  // another model.
  auto run = jobs::PrepareFeatureRun(config, dataset, config.source_path, run::LaunchInfo{}, *coordinator, {},
                                     config.train.hyperparameters.global_crops_size);
  if (!run.ok()) return run.status();
  const auto& entries = run->dataset.entries;
  if (run->dataset.classes.size() < 2) {
    *why_not = "the data set has one class (no labels to check against)";
    return std::unique_ptr<LearningCheck>();
  }
  std::vector<size_t> train, test;
  for (size_t i = 0; i < entries.size(); ++i) (run->splits[i] == data::Split::kTrain ? train : test).push_back(i);
  // As many as scdino.learning_check_mb holds (float32 at the crop size),
  // up to 1,000 held out and 2,000 neighbours, a third held out.
  const int64_t size = run->prep.resize;
  const int64_t image_bytes = config.dino_options().vit.in_chans() * size * size * 4;
  const int64_t bound = config.scdino.learning_check_mb << 20;
  const int64_t fit = bound / std::max<int64_t>(1, image_bytes);
  const int64_t max_test = std::min(kMaxTest, fit / 3), max_train = std::min(kMaxTrain, fit - max_test);
  const auto seed = static_cast<uint64_t>(config.meta.seed);
  train = Sample(std::move(train), max_train, seed ^ 0x1ea4);
  test = Sample(std::move(test), max_test, seed ^ 0x7e57);
  if (fit < 6) {
    *why_not = "scdino.learning_check_mb (" + std::to_string(config.scdino.learning_check_mb) + " MiB) holds " +
               std::to_string(fit) + " images of " + std::to_string(image_bytes >> 10) + " KiB (" +
               std::to_string(config.dino_options().vit.in_chans()) + " x " + std::to_string(size) + " x " +
               std::to_string(size) + " float32): at least 6 are needed";
    return std::unique_ptr<LearningCheck>();
  }
  if (test.size() < 2 || train.size() < 2) {
    *why_not = "the held-out split has fewer than 2 images";
    return std::unique_ptr<LearningCheck>();
  }
  std::unique_ptr<LearningCheck> c(new LearningCheck());
  c->classes_ = static_cast<int64_t>(run->dataset.classes.size());
  c->device_ = device;
  c->vit_ = config.dino_options().vit;
  c->seed_ = seed;
  c->margin_ = config.scdino.learning_margin;
  c->wait_ = std::chrono::seconds(std::max<int64_t>(1, config.scdino.distributed_timeout_s / 3));
  const auto images = static_cast<int64_t>(train.size() + test.size());
  std::cerr << "scdino-trainer: learning check: " << test.size() << " held-out images and " << train.size()
            << " neighbours, " << ((images * image_bytes) >> 20) << " MiB (scdino.learning_check_mb: "
            << config.scdino.learning_check_mb << "), loading beside the training; baselines: a random ViT and the "
            << "raw pixels (" << features::PixelsPrepared(config.dino_options().vit.in_chans(), size) << ")\n";
  // Read by a thread of its own while the ranks train: no rank waits for it
  // in a collective (Measure waits a bounded time, then skips the check).
  LoadJob job{run->prep, config.bad_image_policy() == data::BadImagePolicy::kSkip,
              std::make_shared<const data::Dataset>(std::move(run->dataset)), std::move(train), std::move(test), images};
  c->loader_ = std::thread(&LearningCheck::Load, c.get(), std::move(job));
  return c;
}

// The loader thread's work: the images of both splits, read and stacked,
// then published under mu_ (loaded_, the tensors or the error).
void LearningCheck::Load(LoadJob job) {
  ProgressLog progress(&std::cerr, "scdino-trainer: learning check: loading", "images");
  int64_t loaded = 0;
  auto load = [&](const std::vector<size_t>& rows, torch::Tensor* x, torch::Tensor* y) -> Status {
    std::vector<torch::Tensor> stack;
    std::vector<int64_t> labels;
    for (size_t i : rows) {
      if (stop_.load()) return Status::Aborted("the learning check's loading was stopped");
      progress.Report(loaded++, job.images);
      auto img = features::LoadForModel(*job.data, i, job.prep);
      // A bad image the run skips (on_bad_image: skip) is left out here too.
      if (!img.ok()) {
        if (job.skip) continue;
        return img.status();
      }
      stack.push_back(*img);
      labels.push_back(job.data->entries[i].label);
    }
    if (stack.size() < 2) return Status::FailedPrecondition("fewer than 2 of its images could be read");
    // On the CPU: moved to the device a batch at a time.
    *x = torch::stack(stack);
    *y = torch::tensor(labels, torch::kInt64).to(device_);
    return Status::Ok();
  };
  torch::Tensor train_x, train_y, test_x, test_y;
  Status s;
  try {
    torch::NoGradGuard no_grad;
    s = load(job.train, &train_x, &train_y);
    if (s.ok()) s = load(job.test, &test_x, &test_y);
  } catch (const std::exception& e) {
    s = Status::Internal(std::string("the learning check's loading failed: ") + e.what());
  }
  if (s.ok()) progress.Report(job.images, job.images);
  std::lock_guard<std::mutex> lock(mu_);
  load_status_ = s;
  if (s.ok()) {
    train_x_ = train_x;
    train_y_ = train_y;
    test_x_ = test_x;
    test_y_ = test_y;
  }
  loaded_ = true;
  cv_.notify_all();
}

LearningCheck::~LearningCheck() {
  stop_ = true;
  if (loader_.joinable()) loader_.join();
}

bool LearningCheck::WaitLoaded(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, wait, [&] { return loaded_; });
}

double LearningCheck::Top1(const std::function<torch::Tensor(const torch::Tensor&)>& of) const {
  torch::NoGradGuard no_grad;
  auto features = [&](const torch::Tensor& x) {
    std::vector<torch::Tensor> out;
    for (int64_t at = 0; at < x.size(0); at += 64) {
      out.push_back(of(x.slice(0, at, std::min(x.size(0), at + 64)).to(device_)).to(torch::kFloat32));
    }
    return torch::nn::functional::normalize(torch::cat(out), torch::nn::functional::NormalizeFuncOptions().dim(1));
  };
  const auto train = features(train_x_), test = features(test_x_);
  eval::KnnOptions o;
  o.ks = {kK};
  o.ranks = 1;
  const auto r = eval::WeightedKnn(train, train_y_, test, classes_, o);
  const auto top1 = r.ranked[0].select(1, 0);
  return top1.eq(test_y_).to(torch::kFloat64).mean().item<double>();
}

double LearningCheck::Top1(model::VisionTransformer vit) const {
  const bool was_training = vit->is_training();
  vit->eval();
  const double top1 = Top1([&](const torch::Tensor& x) { return vit->forward(x); });
  if (was_training) vit->train();
  return top1;
}

std::optional<training::LearningReport> LearningCheck::Measure(model::VisionTransformer teacher, int64_t epoch,
                                                              int64_t iteration) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!WaitLoaded(wait_)) {
    std::cerr << "scdino-trainer: learning check at epoch " << epoch << " skipped: its images are still loading after "
              << wait_.count() << " s (a third of scdino.distributed_timeout_s, which the other ranks wait at most)\n";
    return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!load_status_.ok()) {
      if (!said_why_) {
        said_why_ = true;
        std::cerr << "scdino-trainer: no learning check: " << load_status_.message() << "\n";
      }
      return std::nullopt;
    }
  }
  if (random_top1_ < 0) {
    // scdino-features --random-init's baseline: the same shape and seed
    // (it reseeds the generator, which every training step seeds anew).
    auto random = features::RandomBackbone(vit_, seed_, device_);
    random_top1_ = Top1(random.vit);
    // The images as they are, prepared as for the model (the loaded ones).
    pixels_top1_ = Top1([](const torch::Tensor& x) { return features::PixelFeatures(x); });
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
  r.pixels_top1 = pixels_top1_;
  r.margin = margin_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace scdino::trainer
