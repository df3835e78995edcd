#include "plan/recipe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace scdino::run {
namespace {

const std::string kHyper = "train_scDINO.hyperparameters.";

std::string RecipeNumber(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string Fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string ImageDims(const DataShape& d) { return std::to_string(d.height) + " x " + std::to_string(d.width) + " px"; }

// The nearest power of two of v (in the log), at least 1.
int64_t Pow2Near(double v) { return int64_t{1} << static_cast<int>(std::lround(std::log2(std::max(v, 1.0)))); }

}  // namespace

namespace {

Status CheckBatchFits(const DataShape& d, const RunConfig& c) {
  if (d.images < d.global_batch) {
    return Status::InvalidArgument(
        d.origin + ": " + std::to_string(d.images) + " images, fewer than one global batch of " +
        std::to_string(d.global_batch) + " (train_scDINO.batch_size_per_gpu " +
        std::to_string(c.train.batch_size_per_gpu) + " x " + std::to_string(d.ranks) +
        " ranks): an epoch would have no batch. Use at most " + std::to_string(std::max<int64_t>(1, d.images / d.ranks)) +
        " images per rank (batch_size_per_gpu), or fewer ranks");
  }
  return Status::Ok();
}

}  // namespace

Status CheckDataFitsRun(const DataShape& d, const RunConfig& c) {
  if (auto s = CheckBatchFits(d, c); !s.ok()) return s;
  const auto& h = c.train.hyperparameters;
  const int64_t side = std::min(d.height, d.width);
  if (side < h.patch_size || side < h.local_crops_size) {
    const bool patch = side < h.patch_size;
    return Status::InvalidArgument(
        d.first_image + ": the images are " + ImageDims(d) + ", smaller than the " +
        (patch ? "patch (" + std::to_string(h.patch_size) + " px, " + kHyper + "patch_size)"
               : "local crops (" + std::to_string(h.local_crops_size) + " px, " + kHyper + "local_crops_size)") +
        ": a crop would be mostly interpolated pixels. Use crops and a patch at most the image's side (scdino.recipe: "
        "auto derives them)");
  }
  return Status::Ok();
}

StatusOr<std::vector<RecipeValue>> DeriveRecipe(const DataShape& d, const RunConfig& c) {
  const int64_t side = std::min(d.height, d.width);
  if (side < 16) {
    return Status::InvalidArgument(d.first_image + ": the images are " + ImageDims(d) +
                                   "; scdino.recipe: auto needs at least 16 px (4 x 4 patches of 4 px)");
  }
  if (auto s = CheckBatchFits(d, c); !s.ok()) return s;
  std::vector<RecipeValue> r;
  auto add = [&](const std::string& key, const std::string& value, const std::string& why) {
    r.push_back({key, value, why, c.given_keys.count(key) > 0});
  };
  // The model's input: a patch that gives the global crop 6-8 tokens a side
  // or more (a ViT needs some tokens to relate), crops as large as the image.
  // Each derived from the ones before, or from the file's value where it
  // gives one.
  const auto& h = c.train.hyperparameters;
  auto given = [&](const std::string& key) { return c.given_keys.count(kHyper + key) > 0; };
  const int64_t patch = given("patch_size") ? h.patch_size : side < 40 ? 4 : side < 112 ? 8 : 16;
  const int64_t global =
      given("global_crops_size") ? h.global_crops_size : std::max(patch, std::min<int64_t>(side, 224) / patch * patch);
  const int64_t local =
      given("local_crops_size") ? h.local_crops_size : std::max(2 * patch, global / 2 / patch * patch);
  const std::string tokens = std::to_string(global / patch) + " x " + std::to_string(global / patch);
  add(kHyper + "patch_size", std::to_string(patch),
      "images of " + std::to_string(side) + " px: " + tokens + " tokens per global crop");
  add(kHyper + "global_crops_size", std::to_string(global), "the image's side (at most 224), a multiple of the patch");
  add(kHyper + "local_crops_size", std::to_string(local), "half the global crop, at least 2 x 2 patches");
  add("downstream_analyses.compute_cls_features.resize_length", std::to_string(global),
      "features of the image at the size the model trained on");
  // Flips only where a flipped image still looks like the data's own: cells
  // and textures lie every which way; digits and clothing share an
  // orientation, which a flip would teach the features to ignore.
  auto flip = [&](const std::string& key, double ratio, const std::string& how) {
    if (ratio <= 0) return;
    const bool oriented = ratio >= kOrientedFlipDistance;
    add("scdino.augmentation." + key, oriented ? "0" : "0.5",
        "flipped " + how + ", an image is " + Fixed2(ratio) + " x as far from its nearest image of the set as " +
            "unflipped (median; measured on " + std::to_string(d.flip_sample) + " images; " +
            (oriented ? "from " + Fixed2(kOrientedFlipDistance) + ": the images share an orientation, which a flip "
                        "would teach the features to ignore"
                      : "below " + Fixed2(kOrientedFlipDistance) + ": a flipped image is like the others"));
  };
  flip("hflip_p", d.hflip_distance, "left-right");
  flip("vflip_p", d.vflip_distance, "up-down");
  // Images that share an orientation are framed alike (a digit, a garment
  // filling the frame): their layout is what tells them apart, and a part
  // of one is not like the whole. Views that keep more of it.
  const bool aligned = d.hflip_distance >= kOrientedFlipDistance || d.vflip_distance >= kOrientedFlipDistance;
  if (aligned) {
    add(kHyper + "global_crops_scale", "[0.6, 1.0]",
        "images that share an orientation are framed alike: crops keep most of the frame");
    add(kHyper + "local_crops_scale", "[0.3, 0.6]", "the same for the local crops");
    // DINO's blur is in pixels of a 224 px crop: on a crop of 28 px the
    // same sigma erases the strokes that tell such images apart (SimCLR and
    // others leave the blur out on 32 px images). The same blur relative to
    // the crop. (Cells keep DINO's: it teaches them to ignore focus and noise.)
    const auto& aug = c.scdino.augmentation;
    const double blur_scale = std::min(1.0, static_cast<double>(global) / 224.0);
    add("scdino.augmentation.blur_sigma",
        "[" + RecipeNumber(aug.blur_sigma[0] * blur_scale) + ", " + RecipeNumber(aug.blur_sigma[1] * blur_scale) + "]",
        "images framed alike: the blur's sigma of " + RecipeNumber(aug.blur_sigma[0]) + "-" +
            RecipeNumber(aug.blur_sigma[1]) + " px is for 224 px crops, x " + RecipeNumber(blur_scale) + " for crops of " +
            std::to_string(global) + " px keeps the same blur relative to the image");
    // Solarised, a bright stroke or silhouette on a plain ground turns into
    // the ground: a view with nothing left to tell the image by.
    add("scdino.augmentation.solarize_p", "0",
        "images framed alike are shapes on a plain ground, which solarisation erases");
  } else {
    // A cell image holds one object: crops that keep most of it in view (at
    // DINO's scales most local crops are background, which nothing predicts).
    add(kHyper + "global_crops_scale", "[0.4, 1.0]", "a cell image holds one object: crops keep it in view");
    add(kHyper + "local_crops_scale", "[0.15, 0.4]", "the same for the local crops");
  }
  add(kHyper + "local_crops_number", "4", "4 local crops: the small-data recipe's");
  // Capacity for the data: a small ViT, prototypes growing with sqrt(N).
  const bool small = d.images < 50000;
  add(kHyper + "arch", small ? "vit_tiny" : "vit_small",
      small ? "below 50,000 images: a ViT of 192 dimensions" : "50,000 images or more: a ViT of 384 dimensions");
  add(kHyper + "depth", small ? "6" : "12", "6 blocks below 50,000 images, 12 above");
  const int64_t out_dim = std::clamp<int64_t>(Pow2Near(8.0 * std::sqrt(static_cast<double>(d.images))), 64, 65536);
  add(kHyper + "out_dim", std::to_string(out_dim),
      "prototypes: the power of two nearest 8 x sqrt(" + std::to_string(d.images) + " images)");
  // The schedule: steps growing as N^0.75 (more data needs more steps, but
  // less than in proportion): 256 for a few hundred images, about 550 for
  // 1,800, 2,000 for 10,000, DINO's 100-epoch order at ImageNet's size.
  const int64_t niter = std::max<int64_t>(1, d.images / d.global_batch);
  const int64_t target_steps = std::clamp<int64_t>(
      static_cast<int64_t>(std::lround(2.0 * std::pow(static_cast<double>(d.images), 0.75))), 256, 200000);
  const int64_t epochs = c.given_keys.count("train_scDINO.epochs") > 0
                             ? c.train.epochs
                             : std::clamp<int64_t>((target_steps + niter - 1) / niter, 4, 300);
  const int64_t steps = epochs * niter;
  add("train_scDINO.epochs", std::to_string(epochs),
      std::to_string(niter) + " steps per epoch; about 2 x N^0.75 = " + std::to_string(target_steps) +
          " steps in all (4 to 300 epochs)");
  add(kHyper + "warmup_epochs", std::to_string(std::max<int64_t>(1, epochs / 8)), "an eighth of the epochs, at least one");
  // Per global batch of 256: 0.015 at a few hundred steps, lower for longer
  // runs, whose high-rate phase otherwise drifts into a collapse.
  const double lr = std::clamp(0.015 * std::sqrt(256.0 / static_cast<double>(steps)), 0.0005, 0.015);
  add(kHyper + "lr", RecipeNumber(lr), "0.015 x sqrt(256 / " + std::to_string(steps) + " steps), per 256 images of a batch");
  add(kHyper + "min_lr", "1e-06", "DINO's");
  const double momentum = std::clamp(1.0 - 7.0 / static_cast<double>(steps), 0.95, 0.996);
  add(kHyper + "momentum_teacher", RecipeNumber(momentum),
      "the teacher's half-life about a tenth of the run's " + std::to_string(steps) + " steps");
  // Teacher targets that depend on the image (docs/training.md, small data).
  add("scdino.teacher_centering", "sinkhorn_knopp", "every prototype gets a share of each batch (no one-hot collapse)");
  add(kHyper + "teacher_temp", "0.01", "a sharp teacher: equipartition needs image-specific answers");
  add(kHyper + "warmup_teacher_temp", "0.01", "no teacher warm-up");
  add(kHyper + "warmup_teacher_temp_epochs", "0", "no teacher warm-up");
  add("scdino.koleo_loss_weight", "0.1", "DINOv2's KoLeo spreads the CLS features");
  add("train_scDINO.saveckp_freq", std::to_string(std::max<int64_t>(1, epochs / 4)),
      "4 numbered checkpoints, each with a learning check");
  return r;
}

StatusOr<RunConfig> WithRecipe(const RunConfig& c, const std::vector<RecipeValue>& recipe,
                               const std::vector<RecipeValue>& resume) {
  std::vector<KeyValue> values;
  for (const auto& v : recipe) {
    if (c.given_keys.count(v.key) == 0) values.push_back({v.key, v.value});  // the file wins over a recipe
  }
  for (const auto& v : resume) values.push_back({v.key, v.value});
  return WithValues(c, values);
}

StatusOr<RunConfig> SettingsOfRun(const RunConfig& c, std::string* warning) {
  if (c.scdino.recipe != "auto") return c;
  auto recipe = ReadRecipe(RecipePath(c));
  if (recipe.ok()) return WithRecipe(c, recipe->values);
  if (recipe.status().code() != StatusCode::kNotFound) return recipe.status();
  if (warning) {
    *warning = "scdino.recipe is auto but " + RecipePath(c) +
               " is not there yet (scdino-trainer writes it at the run's start): the file's values and the defaults "
               "apply";
  }
  if (auto s = CheckConfig(c); !s.ok()) return Status::InvalidArgument(c.source_path + ": " + s.message());
  return c;
}

std::vector<std::string> DescribeRecipe(const std::vector<RecipeValue>& recipe) {
  std::vector<std::string> lines;
  for (const auto& v : recipe) {
    lines.push_back(v.key + ": " + (v.from_file ? "kept from the file (the recipe would set " + v.value + ")"
                                                : v.value + " (" + v.why + ")"));
  }
  return lines;
}

std::string RecipePath(const RunConfig& c) { return c.run_dir() + "/recipe.json"; }

namespace {

nlohmann::json ValuesToJson(const std::vector<RecipeValue>& recipe) {
  auto j = nlohmann::json::array();
  for (const auto& v : recipe) j.push_back({{"key", v.key}, {"value", v.value}, {"why", v.why}, {"from_file", v.from_file}});
  return j;
}

// Throws nlohmann's exceptions on a malformed list.
std::vector<RecipeValue> ValuesFromJson(const nlohmann::json& j) {
  std::vector<RecipeValue> out;
  for (const auto& v : j) {
    out.push_back({v.at("key").get<std::string>(), v.at("value").get<std::string>(), v.at("why").get<std::string>(),
                   v.at("from_file").get<bool>()});
  }
  return out;
}

}  // namespace

std::string RecipeValuesJson(const std::vector<RecipeValue>& recipe) { return ValuesToJson(recipe).dump(); }

StatusOr<std::vector<RecipeValue>> ParseRecipeValues(const std::string& json, const std::string& what) {
  try {
    return ValuesFromJson(nlohmann::json::parse(json));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(what + ": not a list of recipe values (" + e.what() + ")");
  }
}

Status WriteRecipe(const std::string& path, const DataShape& d, const std::vector<RecipeValue>& recipe) {
  nlohmann::json j;
  j["data"] = {{"origin", d.origin}, {"first_image", d.first_image}, {"images", d.images},
               {"height", d.height}, {"width", d.width},             {"channels", d.channels},
               {"ranks", d.ranks},   {"global_batch", d.global_batch}};
  j["values"] = ValuesToJson(recipe);
  const auto dir = std::filesystem::path(path).parent_path();
  if (auto s = MakeDirs(dir.empty() ? "." : dir.string()); !s.ok()) return s;
  return WriteFileAtomic(path, j.dump(2) + "\n");
}

StatusOr<RecipeFile> ReadRecipe(const std::string& path) {
  if (!FileExists(path)) return Status::NotFound(path + ": no recipe written yet");
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  RecipeFile out;
  try {
    const auto j = nlohmann::json::parse(*text);
    const auto& d = j.at("data");
    out.data.origin = d.at("origin").get<std::string>();
    out.data.first_image = d.at("first_image").get<std::string>();
    out.data.images = d.at("images").get<int64_t>();
    out.data.height = d.at("height").get<int64_t>();
    out.data.width = d.at("width").get<int64_t>();
    out.data.channels = d.at("channels").get<int64_t>();
    out.data.ranks = d.at("ranks").get<int64_t>();
    out.data.global_batch = d.at("global_batch").get<int64_t>();
    out.values = ValuesFromJson(j.at("values"));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": not a recipe file (" + e.what() + "); delete it to derive the recipe again");
  }
  return out;
}

bool SameData(const DataShape& a, const DataShape& b) {
  return a.origin == b.origin && a.images == b.images && a.height == b.height && a.width == b.width &&
         a.channels == b.channels;
}

std::string DescribeData(const DataShape& d) {
  return std::to_string(d.images) + " images of " + ImageDims(d) + ", " + std::to_string(d.channels) +
         " channels, from " + d.origin;
}

}  // namespace scdino::run
