#include "plan/plan.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "plan/source.h"

namespace scdino::run {

StatusOr<RunConfig> PlanSettings(const RunConfig& config, const std::vector<RecipeValue>& recipe,
                                 const std::vector<RecipeValue>& resume) {
  return WithRecipe(config, recipe, resume);
}

namespace {

// The batch per rank the run will have: the resume's, else the file's.
int64_t PlannedBatch(const RunConfig& c, const std::vector<RecipeValue>& resume) {
  for (const auto& v : resume) {
    if (v.key == "train_scDINO.batch_size_per_gpu") return std::strtoll(v.value.c_str(), nullptr, 10);
  }
  return c.train.batch_size_per_gpu;
}

// With scdino.recipe: auto, the recipe of the data `shape` measured: the
// one recipe.json holds when it was derived for this data, else derived
// and written there. `lines` gets what to log.
StatusOr<std::vector<RecipeValue>> SettleRecipe(const RunConfig& c, const data::Dataset& dataset, DataShape shape,
                                                bool resuming, const std::function<bool()>& should_stop,
                                                std::vector<std::string>* lines) {
  const std::string path = RecipePath(c);
  auto file = ReadRecipe(path);
  if (!file.ok() && file.status().code() != StatusCode::kNotFound) return file.status();
  if (file.ok() && SameData(file->data, shape)) {
    lines->push_back("recipe auto, as " + path + " holds it (the run's start derived it):");
    return file->values;
  }
  if (file.ok()) {
    // Derived for other data: a resume of those weights on this data
    // would train another run under the old one's name.
    if (resuming) {
      return Status::InvalidArgument(path + " was derived for " + DescribeData(file->data) + ", but the data now is " +
                                     DescribeData(shape) +
                                     ": a resume trains on the data its run started with; point the config at "
                                     "that data, or start afresh with --no-resume (a new recipe is derived)");
    }
    lines->push_back(path + " was derived for " + DescribeData(file->data) + "; this fresh start's data is " +
                     DescribeData(shape) + ": the recipe is derived anew");
  }
  if (auto s = MeasureFlips(c, dataset, &shape, should_stop); !s.ok()) return s;
  auto derived = DeriveRecipe(shape, c);
  if (!derived.ok()) return derived.status();
  if (auto s = WriteRecipe(path, shape, *derived); !s.ok()) return s;
  lines->push_back("recipe auto for " + std::to_string(shape.images) + " images of " + std::to_string(shape.height) +
                   " x " + std::to_string(shape.width) + " px, " + std::to_string(shape.channels) +
                   " channels, global batch " + std::to_string(shape.global_batch) + " (written to " + path +
                   "; keys the config sets win):");
  return derived;
}

}  // namespace

StatusOr<RunPlan> ResolvePlan(const RunConfig& config, const data::Dataset& dataset, int64_t ranks, bool resuming,
                              const std::vector<RecipeValue>& resume, const std::function<bool()>& should_stop) {
  RunPlan plan;
  plan.resume = resume;
  for (const auto& v : resume) plan.why.push_back("resume: " + v.why);
  // The first image, read once for the checks and the shape; unreadable
  // images are the loader's (on_bad_image), not the combinations' check.
  const data::FirstImage first = data::ProbeFirstImage(dataset, config.image_prep());
  if (auto s = CheckCombinations(config, first, /*only_trained=*/true); !s.ok() && s.code() != StatusCode::kNotFound) {
    return s;
  }
  auto shape = MeasureData(config, dataset, first, ranks);
  if (!shape.ok()) return shape.status();
  // The global batch the run will have (the recipe's steps per epoch).
  shape->global_batch = PlannedBatch(config, resume) * ranks;
  if (config.scdino.recipe == "auto") {
    auto recipe = SettleRecipe(config, dataset, *shape, resuming, should_stop, &plan.why);
    if (!recipe.ok()) return recipe.status();
    plan.recipe = std::move(recipe).value();
    for (auto& l : DescribeRecipe(plan.recipe)) plan.why.push_back("  " + l);
  }
  auto settings = PlanSettings(config, plan.recipe, plan.resume);
  if (!settings.ok()) return settings.status();
  plan.settings = std::move(settings).value();
  if (auto s = CheckDataFitsRun(*shape, plan.settings); !s.ok()) return s;
  return plan;
}

StatusOr<RunPlan> SettlePlan(const RunConfig& config, const data::Dataset& dataset, Coordinator& coordinator,
                             bool resuming, const std::vector<RecipeValue>& resume,
                             const std::function<bool()>& should_stop) {
  // Rank 0 resolves first and then shares what it settled (or its error).
  StatusOr<RunPlan> mine = RunPlan{};
  StatusOr<std::string> settled = std::string();
  if (coordinator.is_rank_zero()) {
    try {
      mine = ResolvePlan(config, dataset, coordinator.world_size(), resuming, resume, should_stop);
    } catch (const std::exception& e) {
      mine = Status::Internal(e.what());
    }
    settled = mine.ok() ? StatusOr<std::string>(nlohmann::json{{"recipe", RecipeValuesJson(mine->recipe)},
                                                               {"resume", RecipeValuesJson(mine->resume)}}
                                                    .dump())
                        : StatusOr<std::string>(mine.status());
  }
  auto decided = coordinator.ShareDecision("plan", std::move(settled));
  if (!decided.ok()) return decided.status();
  if (coordinator.is_rank_zero()) return mine;
  RunPlan plan;
  try {
    const auto j = nlohmann::json::parse(*decided);
    auto recipe = ParseRecipeValues(j.at("recipe").get<std::string>(), "the recipe rank 0 settled");
    auto resume = ParseRecipeValues(j.at("resume").get<std::string>(), "the resume rank 0 settled");
    if (!recipe.ok()) return recipe.status();
    if (!resume.ok()) return resume.status();
    plan.recipe = std::move(recipe).value();
    plan.resume = std::move(resume).value();
  } catch (const std::exception& e) {
    return Status::Internal("rank 0's plan is not what it sends: " + std::string(e.what()));
  }
  auto settings = PlanSettings(config, plan.recipe, plan.resume);
  if (!settings.ok()) return settings.status();
  plan.settings = std::move(settings).value();
  return plan;
}

}  // namespace scdino::run
