#include "process/command_line.h"

#include <cstdlib>

#include "config/config_schema.h"
#include "launch/environment.h"
#include "launch/launch.h"
#include "plan/recipe.h"
#include "process/exit_codes.h"

namespace scdino::process {

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
  app_->add_option("--set", settings_,
                   "a config key's value, as if the file gave it: KEY=VALUE with the key's full path "
                   "(--set train_scDINO.epochs=50 --set meta.name_of_run=lr-1e-4); repeatable, a later one wins; "
                   "docs/config.md lists the keys; give every service of a run the same")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app_->add_option("--threads", threads_, "intra-op CPU threads; 0: all cores")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->default_str("scdino.threads")
      ->type_name("N");
}

std::optional<int> CommandLine::Parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (auto code = app_.Parse(argc, argv, out, err)) return code;
  if (config_path_.empty()) {  // not required: the defaults, named so in messages
    if (!settings_.empty()) {
      err << program_ << ": --set " << settings_[0] << ": --set changes a config's key; give the config (--config FILE)\n";
      return kExitBadInput;
    }
    config_.source_path = "the defaults (no --config)";
    return std::nullopt;
  }
  auto config = run::LoadRunConfig(config_path_, settings_);
  if (!config.ok()) {
    err << program_ << ": " << config.status().message() << "\n";
    return kExitBadInput;
  }
  config_ = std::move(config).value();
  // The ignored keys, said once per job step in one line: by rank 0, or a
  // process outside a launch (every rank of a step would repeat them).
  auto launch = run::LaunchFromEnv([](const char* k) { return std::getenv(k); });
  if (!config_.warnings.empty() && (!launch.ok() || launch->rank == 0)) {
    err << program_ << ": " << config_path_ << ": " << config_.warnings.size() << " key(s) ignored: ";
    for (size_t i = 0; i < config_.warnings.size(); ++i) err << (i ? "; " : "") << config_.warnings[i];
    err << "\n";
  }
  if (launch.ok() && launch->rank == 0) {
    for (const auto& note : launch->notes) err << program_ << ": warning: " << note << "\n";
  }
  return std::nullopt;
}

std::optional<run::RunConfig> CommandLine::RunSettings(const std::vector<run::KeyValue>& flags,
                                                      std::ostream& err) const {
  std::string warning;
  // Without --config there is no run to have trained: the defaults and the
  // flags, no recipe.json looked for.
  auto settings = config_path_.empty() ? StatusOr<run::RunConfig>(config_) : run::SettingsOfRun(config_, &warning);
  if (settings.ok() && !flags.empty()) settings = run::WithValues(*settings, flags);
  if (!settings.ok()) {
    err << program_ << ": " << settings.status().message() << "\n";
    return std::nullopt;
  }
  if (!warning.empty()) err << program_ << ": warning: " << warning << "\n";
  return std::move(settings).value();
}

int CommandLine::ConfigureCpu() const {
  return run::ConfigureCpu(threads_ >= 0 ? threads_ : config_.scdino.threads, config_.scdino.cpu_gemm);
}

}  // namespace scdino::process
