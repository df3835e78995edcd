// The training recipe as a function of the data (scdino.recipe: auto): what
// configs/small-data.yaml fixes for one data set (epochs, warm-ups, peak
// learning rate, teacher temperature and momentum, crops, patch, out_dim)
// derived from the number of images, their size and the global batch, by
// the rules docs/training.md gives with their reasons; and the checks
// every run makes of its data against its batch and crops. (The safer
// settings a run goes on with after a collapse are the training loop's own
// typed edits: training/train_plan.h.)
// Pure functions, except the recipe file's reading and writing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"

namespace scdino::run {

/// What the recipe is derived from.
struct DataShape {
  std::string origin;       ///< the data set (dataset_dir, index CSV, "synthetic")
  std::string first_image;  ///< the image the size was read from
  int64_t images = 0;
  int64_t height = 0, width = 0;  ///< after center_crop
  int64_t channels = 0;
  int64_t ranks = 1;
  int64_t global_batch = 0;  ///< batch_size_per_gpu x ranks
  /// Whether the images share an orientation (MeasureFlips, plan/source.h):
  /// the median distance of a flipped image (left-right, up-down) to its
  /// nearest image of the set over the unflipped image's; about 1 where
  /// the images lie every which way (cells, textures), above where a flip
  /// makes an image unlike the others (digits, clothing). 0: not measured,
  /// and the flips stay as configured.
  double hflip_distance = 0, vflip_distance = 0;
  int64_t flip_sample = 0;  ///< images the ratios were measured on
};

/// The ratio (DataShape::hflip_distance, vflip_distance) from which the
/// recipe turns a flip off: sets whose images lie every which way measure
/// 0.97-1.05 here, oriented ones 1.16-1.85 (docs/training.md).
inline constexpr double kOrientedFlipDistance = 1.1;

/// One derived key: its full path, its value as YAML, and why.
struct RecipeValue {
  std::string key;
  std::string value;
  std::string why;
  bool from_file = false;  ///< the config sets the key, which wins
};

/// What every run refuses, naming the numbers: fewer images than one global
/// batch; images smaller than the patch or the local crops.
Status CheckDataFitsRun(const DataShape& d, const RunConfig& c);

/// The recipe for `d`: every derived key, `from_file` set where `c` gives
/// the key. InvalidArgument for images too small for any ViT recipe (16 px).
StatusOr<std::vector<RecipeValue>> DeriveRecipe(const DataShape& d, const RunConfig& c);

/// `c` with every value of `recipe` whose key the file does not give
/// (c.given_keys), then every value of `resume` whatever the file says (an
/// elastic resume's batch), checked across keys once (run::WithValues).
StatusOr<RunConfig> WithRecipe(const RunConfig& c, const std::vector<RecipeValue>& recipe,
                               const std::vector<RecipeValue>& resume = {});

/// The settings a run trained with, for the services after its trainer
/// (features, evaluation, the preflight): with scdino.recipe: auto, `c`
/// with the values of the run's recipe.json; `c` checked across keys when
/// there is none yet (`warning` then says so: the file's values and the
/// defaults apply). With recipe: manual, `c` as it is.
StatusOr<RunConfig> SettingsOfRun(const RunConfig& c, std::string* warning);

/// Lines that say what the recipe set and kept, for the log.
std::vector<std::string> DescribeRecipe(const std::vector<RecipeValue>& recipe);

/// <run_dir>/recipe.json: the data shape and the values a run started with,
/// which its resumes and the other services (features, evaluation) apply;
/// WriteRecipe makes its folder.
std::string RecipePath(const RunConfig& c);
Status WriteRecipe(const std::string& path, const DataShape& d, const std::vector<RecipeValue>& recipe);
/// The values as a JSON array (recipe.json's "values"), and back: what rank
/// 0 sends the other ranks. ParseRecipeValues names `what` in its error.
std::string RecipeValuesJson(const std::vector<RecipeValue>& recipe);
StatusOr<std::vector<RecipeValue>> ParseRecipeValues(const std::string& json, const std::string& what);
struct RecipeFile {
  DataShape data;  ///< what the values were derived for
  std::vector<RecipeValue> values;
};
/// NotFound when the file is not there.
StatusOr<RecipeFile> ReadRecipe(const std::string& path);

/// Whether a recipe derived for `a` holds for `b`: the same data set
/// (origin, image count, size after the crop, channels). The ranks and
/// the global batch may differ (an elastic resume).
bool SameData(const DataShape& a, const DataShape& b);
/// "1200 images of 64 x 64 px, 5 channels, from data/cells".
std::string DescribeData(const DataShape& d);

}  // namespace scdino::run
