#include "trainer/training_data.h"

#include "common/files.h"
#include "data/crop_preview.h"
#include "data/synthetic.h"
#include "plan/source.h"
#include "training/checkpoint.h"

namespace scdino::trainer {
namespace {

// Rank 0's <run_dir>/crops_preview.png (data/crop_preview.h): the first
// readable of the first images and the crops the settled recipe makes of it.
// A picture for people: one that cannot be made is a line in the log, never
// the run's end.
void WriteCropsPreview(const run::RunConfig& settings, const data::Dataset& dataset, std::ostream* log) {
  torch::Tensor image;
  if (settings.scdino.data_source == "synthetic") {
    data::SyntheticOptions one = settings.scdino.synthetic;
    one.per_class = 1;
    image = data::MakeSyntheticSet(one).images[0].index_select(0, torch::tensor(settings.channels(), torch::kInt64));
  } else {
    for (size_t i = 0; i < dataset.entries.size() && i < 8 && !image.defined(); ++i) {
      auto loaded = data::LoadEntry(dataset, i, settings.image_prep());
      if (loaded.ok()) image = *loaded;
    }
  }
  const std::string path = settings.run_dir() + "/crops_preview.png";
  Status written = image.defined() ? MakeDirs(settings.run_dir())
                                   : Status::NotFound("none of the first 8 images could be read");
  if (written.ok()) written = data::WriteCropPreview(path, image, settings.multicrop_options());
  if (log && !written.ok()) *log << "scdino-trainer: no crop preview (" << written.ToString() << ")\n";
}

}  // namespace

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
  if (coordinator.is_rank_zero()) WriteCropsPreview(settings, *dataset, log);
  if (coordinator.is_rank_zero() && settings.scdino.learning_check != "off") {
    auto made = LearningCheck::Make(settings, *dataset, device, &out.no_check);
    if (!made.ok()) return made.status();
    out.check = std::move(made).value();
  }
  return out;
}

}  // namespace scdino::trainer
