#include "runtime/command_line.h"

#include "run/environment.h"
#include "run/recipe.h"
#include "runtime/exit_codes.h"

namespace scdino::runtime {

CommandLine::CommandLine(const std::string& program, const std::string& description, bool config_required)
    : program_(program), app_(program, description) {
  // What it was built with (LibTorch, CUDA, NCCL, cuDNN) and the GPUs it
  // sees: asked only when --version is given.
  app_->set_version_flag("--version", [program] { return program + " " + SCDINO_VERSION + "\n" + run::DescribeBuild(); },
                         "print the version, what it was built with (LibTorch, CUDA, NCCL, cuDNN) and the GPUs "
                         "visible, and exit");
  auto* config = app_->add_option("--config", config_path_,
                                  "the run's YAML config (scDINO's scDINO_full_pipeline.yaml keys plus section scdino; "
                                  "docs/config.md)");
  config->type_name("FILE");
  if (config_required) config->required();
  app_->add_option("--threads", threads_, "intra-op CPU threads; 0: all cores")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->default_str("scdino.threads")
      ->type_name("N");
}

std::optional<int> CommandLine::Parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (auto code = app_.Parse(argc, argv, out, err)) return code;
  if (config_path_.empty()) return std::nullopt;  // not required: the defaults
  auto config = run::LoadRunConfig(config_path_);
  if (!config.ok()) {
    err << program_ << ": " << config.status().message() << "\n";
    return kExitBadInput;
  }
  config_ = std::move(config).value();
  for (const auto& w : config_.warnings) err << program_ << ": " << config_path_ << ": " << w << "\n";
  // scdino.recipe: auto: the values the trainer derived at the run's start,
  // so that every service sees the model and crops it trained with.
  if (config_.scdino.recipe == "auto") {
    auto recipe = run::ReadRecipe(run::RecipePath(config_));
    Status applied = recipe.ok() ? run::ApplyRecipe(recipe->values, &config_) : recipe.status();
    if (recipe.status().code() == StatusCode::kNotFound) {
      // The trainer derives it (run::SettleRecipe); the others go on with
      // the file as it is.
      applied = program_ == "scdino-trainer" ? Status::Ok() : run::CheckConfig(config_);
      if (program_ != "scdino-trainer") {
        err << program_ << ": warning: scdino.recipe is auto but " << run::RecipePath(config_)
            << " is not there yet (scdino-trainer writes it at the run's start): the file's values and the defaults "
               "apply\n";
      }
    }
    if (!applied.ok()) {
      err << program_ << ": " << applied.message() << "\n";
      return kExitBadInput;
    }
  }
  return std::nullopt;
}

int CommandLine::ConfigureCpu() const {
  return run::ConfigureCpu(threads_ >= 0 ? threads_ : config_.scdino.threads, config_.scdino.cpu_gemm);
}

}  // namespace scdino::runtime
