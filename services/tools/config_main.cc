// scdino-config: the configuration's schema, for people and for the docs:
// `check FILE` validates a config as the services will (every error and
// ignored key named), `doc` prints the key reference of docs/config.md.
#include <iostream>
#include <string>

#include "common/cli.h"
#include "run/config.h"
#include "run/config_schema.h"
#include "runtime/exit_codes.h"

int main(int argc, char** argv) {
  scdino::cli::App app("scdino-config", "Check a run's config, or print the key reference (docs/config.md).");
  app->require_subcommand(1);
  std::string file;
  auto* check = app->add_subcommand("check", "validate a config file as every scdino service does");
  check->add_option("FILE", file, "the YAML config")->required();
  app->add_subcommand("doc", "print the Markdown key reference of docs/config.md");
  if (auto code = app.Parse(argc, argv)) return *code;
  if (app->got_subcommand("doc")) {
    std::cout << scdino::run::ConfigReference();
    return 0;
  }
  auto c = scdino::run::LoadRunConfig(file);
  if (!c.ok()) {
    std::cerr << "scdino-config: " << c.status().message() << "\n";
    return scdino::runtime::ExitCodeFor(c.status());
  }
  for (const auto& w : c->warnings) std::cerr << "scdino-config: " << file << ": " << w << "\n";
  std::cout << file << ": valid; run directory " << c->run_dir() << ", channels";
  for (auto ch : c->channels()) std::cout << " " << ch;
  std::cout << "\n";
  return 0;
}
