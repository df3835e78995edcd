#include "trainer/training_data.h"

#include "data/crop_preview.h"
#include "plan/source.h"
#include "training/checkpoint.h"

namespace scdino::trainer {

StatusOr<std::vector<run::RecipeValue>> ElasticResume(const run::RunConfig& config, int64_t ranks) {
  std::string note;
  auto batch = training::ResumeBatchPerGpu(config.run_dir() + "/checkpoint.safetensors", ranks,
                                           config.train.batch_size_per_gpu, config.scdino.elastic_resume, &note);
  if (!batch.ok()) return batch.status();
  if (*batch == config.train.batch_size_per_gpu) return std::vector<run::RecipeValue>{};
  return std::vector<run::RecipeValue>{{"train_scDINO.batch_size_per_gpu", std::to_string(*batch), note, false}};
}

StatusOr<TrainingData> PrepareTrainingData(const run::RunConfig& config, run::Coordinator& coordinator,
                                           torch::Device device, bool resuming,
                                           const std::vector<run::RecipeValue>& resume, std::ostream* log,
                                           const std::function<bool()>& should_stop) {
  auto dataset = run::IndexDataset(config, coordinator.is_rank_zero() ? log : nullptr);
  if (!dataset.ok()) return dataset.status();
  // The data against the channel combination, the batch and the crops, and
  // the recipe derived from it (scdino.recipe: auto), before anything is
  // built from the config.
  auto plan = run::SettlePlan(config, *dataset, coordinator, resuming, resume, should_stop);
  if (!plan.ok()) return plan.status();
  if (coordinator.is_rank_zero() && log) {
    for (const auto& line : plan->why) *log << "scdino-trainer: " << line << "\n";
  }
  TrainingData out;
  out.plan = std::move(plan).value();
  const run::RunConfig& settings = out.plan.settings;
  // The source and the check each keep a copy of the index (their threads
  // read it side by side); copying it is not indexing again.
  auto source = run::MakeSource(settings, *dataset, coordinator, device, should_stop);
  if (!source.ok()) return source.status();
  if (auto s = settings.CheckChannelCount((*source)->channels(), "the data"); !s.ok()) return s;
  out.source = std::move(source).value();
  if (coordinator.is_rank_zero() && settings.scdino.learning_check != "off") {
    auto made = LearningCheck::Make(settings, *dataset, device, &out.no_check);
    if (!made.ok()) return made.status();
    out.check = std::move(made).value();
  }
  // Rank 0's <run_dir>/crops_preview.png: the first readable image and the
  // crops the settled recipe makes of it. A picture for people: one that
  // cannot be made is a line in the log, never the run's end.
  if (coordinator.is_rank_zero()) {
    const bool synthetic = settings.scdino.data_source == "synthetic";
    const Status preview =
        data::WriteDataCropPreview(settings.run_dir() + "/crops_preview.png", *dataset, settings.image_prep(),
                                   settings.multicrop_options(), synthetic ? &settings.scdino.synthetic : nullptr);
    if (log && !preview.ok()) *log << "scdino-trainer: no crop preview (" << preview.ToString() << ")\n";
  }
  return out;
}

}  // namespace scdino::trainer
