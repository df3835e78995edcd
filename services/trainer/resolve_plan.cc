#include "trainer/resolve_plan.h"

#include <string>

namespace scdino::trainer {

training::TrainPlan TrainPlanOf(const run::RunConfig& c, torch::Device device, bool bf16_supported) {
  const auto& h = c.train.hyperparameters;
  training::TrainPlan p;
  p.run_dir = c.run_dir();
  p.origin = c.source_path;
  p.recorded_config = c.source_text;
  p.device = device;
  p.seed = static_cast<uint64_t>(c.meta.seed);
  p.batch_size_per_gpu = c.train.batch_size_per_gpu;
  p.epochs = c.train.epochs;
  p.channels = c.channels();
  p.channels_key = "meta.selected_channel_combination_per_run[" + std::to_string(c.scdino.channel_combination) +
                   "], scdino.channel_combination";
  p.dino = c.dino_options(device, bf16_supported);
  p.schedule = c.schedule_options(/*niter_per_epoch=*/1, /*world_size=*/1);
  p.global_crops_size = h.global_crops_size;
  p.local_crops_size = h.local_crops_size;
  p.arch = h.arch;
  p.checkpoints = {c.train.saveckp_freq, c.scdino.keep_checkpoints, c.scdino.checkpoint_every_minutes};
  p.log_every = c.scdino.log_every;
  p.log_samples = c.scdino.log_samples;
  p.stop_on_nonfinite_loss = c.scdino.on_nonfinite_loss == "stop";
  p.on_collapse = c.scdino.on_collapse == "recover" ? training::OnCollapse::kRecover
                  : c.scdino.on_collapse == "stop"  ? training::OnCollapse::kStop
                                                    : training::OnCollapse::kWarn;
  p.max_recoveries = c.scdino.max_recoveries;
  p.elastic_resume = c.scdino.elastic_resume;
  p.recorded_recover = [](const std::string& text) {
    auto recorded = run::ParseRunConfig(text, "the checkpoint's config");
    return recorded.ok() && recorded->scdino.on_collapse == "recover";
  };
  return p;
}

training::TrainPlan TrainPlanOf(const run::RunConfig& c) {
  return TrainPlanOf(c, torch::Device(c.scdino.device == "cuda" ? torch::kCUDA : torch::kCPU));
}

}  // namespace scdino::trainer
