#include "trainer/training_data.h"

#include "run/source.h"

namespace scdino::trainer {

StatusOr<TrainingData> PrepareTrainingData(run::RunConfig* config, run::Coordinator& coordinator,
                                           torch::Device device, bool resuming, std::ostream* log,
                                           const std::function<bool()>& should_stop) {
  auto dataset = run::IndexDataset(*config, coordinator.is_rank_zero() ? log : nullptr);
  if (!dataset.ok()) return dataset.status();
  // The data against the batch and crops, and the recipe derived from it
  // (scdino.recipe: auto), before anything is built from the config.
  auto recipe = run::SettleRecipe(config, *dataset, coordinator, resuming, should_stop);
  if (!recipe.ok()) return recipe.status();
  if (coordinator.is_rank_zero() && log) {
    for (const auto& line : *recipe) *log << "scdino-trainer: " << line << "\n";
  }
  TrainingData out;
  // The source and the check each keep a copy of the index (their threads
  // read it side by side); copying it is not indexing again.
  auto source = run::MakeSource(*config, *dataset, coordinator, device, should_stop);
  if (!source.ok()) return source.status();
  if (auto s = config->CheckChannelCount((*source)->channels(), "the data"); !s.ok()) return s;
  out.source = std::move(source).value();
  if (coordinator.is_rank_zero() && config->scdino.learning_check != "off") {
    auto made = LearningCheck::Make(*config, *dataset, device, &out.no_check);
    if (!made.ok()) return made.status();
    out.check = std::move(made).value();
  }
  return out;
}

}  // namespace scdino::trainer
