// scdino-config: the configuration's schema, for people, scripts and the
// docs: `check FILE` validates a config as the services will (every error
// and ignored key named), `paths FILE` lists every path the config makes a
// service read or write (deploy/slurm/lib.sh mounts exactly these into the
// container, an index CSV's image folders outside its own included), `doc`
// prints the key reference of docs/config.md, `exit-codes` the exit-code
// table of docs/exit-codes.md (--shell: deploy/slurm/lib.sh's block;
// --program: one program's --help line), `combinations FILE` one line per
// channel combination (deploy/slurm/submit.sh sizes its job arrays by it).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "common/cli.h"
#include "config/config.h"
#include "config/config_schema.h"
#include "data/dataset.h"
#include "plan/source.h"
#include "process/exit_codes.h"
#include "programs/mains.h"

namespace scdino::programs::config_main {

namespace {

// Where the shipped Prometheus reads the scdino targets
// (monitoring/prometheus/prometheus.yml; tests/deploy/config_check_test.sh
// checks that the two agree).
constexpr const char* kShippedFileSdDir = "/shared/scdino/runs/prometheus_targets";

// exit-codes: the table, lib.sh's block, or one program's --help line.
int PrintExitCodes(bool shell, const std::string& program) {
  if (!program.empty() && scdino::process::ExitProgramOf(program) == 0) {
    std::cerr << "scdino-config: exit-codes --program " << program
              << ": not an scdino program (scdino-trainer, scdino-features, scdino-eval, scdino-preflight, "
                 "scdino-pack, scdino-stats, scdino-export, scdino-config)\n";
    return scdino::process::kExitBadInput;
  }
  std::cout << (shell               ? scdino::process::ExitCodesShell()
                : program.empty() ? scdino::process::ExitCodesMarkdown()
                                  : scdino::process::ExitCodesHelp(program) + "\n");
  return 0;
}

// More folders than this outside an index CSV's own are refused: each is a
// container mount of its own.
constexpr size_t kMaxCsvImageFolders = 64;

// The folders of an index CSV's images that lie outside the CSV's folder,
// none inside another; refused past kMaxCsvImageFolders naming the first
// image outside. An unreadable CSV or bad row is refused as the services
// refuse it.
scdino::StatusOr<std::vector<std::string>> CsvImageFoldersOutside(const std::string& csv) {
  namespace fs = std::filesystem;
  auto d = scdino::data::IndexCsv(csv);
  if (!d.ok()) return d.status();
  const fs::path parent = fs::path(csv).parent_path();
  std::string own = fs::absolute(parent.empty() ? fs::path(".") : parent).lexically_normal().string();
  if (own.back() != '/') own += "/";
  std::set<std::string> folders;
  std::string first;
  for (const auto& e : d->entries) {
    const std::string path = fs::absolute(e.path).lexically_normal().string();
    if (path.compare(0, own.size(), own) == 0) continue;
    if (first.empty()) first = path;
    folders.insert(fs::path(path).parent_path().string());
  }
  std::vector<std::string> out;
  for (const auto& f : folders) {  // sorted: a folder comes before what lies inside it
    const bool inside = std::any_of(out.begin(), out.end(), [&](const std::string& o) {
      return f.size() > o.size() && f.compare(0, o.size(), o) == 0 && f[o.size()] == '/';
    });
    if (!inside) out.push_back(f);
  }
  if (out.size() > kMaxCsvImageFolders) {
    return scdino::Status::InvalidArgument(
        csv + " (scdino.index_csv): its images lie in " + std::to_string(out.size()) +
        " folders outside the CSV's own, the first " + first + "; at most " + std::to_string(kMaxCsvImageFolders) +
        " are mounted into the container: move the CSV into a folder above its images, or the images under it");
  }
  return out;
}

// paths: relative paths are relative to the working directory, as the
// services read them. A file that a service may create (the statistics
// file) is listed by its folder. An index CSV is listed by its folder and
// the folders of its images outside it (unless `shallow`: what a container
// probe lists before the CSV is mounted).
scdino::Status PrintPaths(const scdino::run::RunConfig& c, const std::string& file, bool shallow) {
  namespace fs = std::filesystem;
  auto line = [](const char* access, const std::string& path, const std::string& key) {
    if (!path.empty()) std::cout << access << "\t" << fs::absolute(path).lexically_normal().string() << "\t" << key << "\n";
  };
  const auto& k = c.scdino;
  std::vector<std::string> csv_folders;
  if (k.data_source == "csv" && !shallow) {
    auto folders = CsvImageFoldersOutside(k.index_csv);
    if (!folders.ok()) return folders.status();
    csv_folders = std::move(folders).value();
  }
  line("ro", fs::path(file).parent_path().empty() ? "." : fs::path(file).parent_path().string(), "the config's folder");
  if (k.data_source == "folder") line("ro", c.meta.dataset_dir, "meta.dataset_dir");
  if (k.data_source == "csv") line("ro", fs::path(k.index_csv).parent_path().string(), "scdino.index_csv");
  for (const auto& f : csv_folders) line("ro", f, "images of scdino.index_csv");
  if (!k.stats_file.empty()) line("rw", fs::path(k.stats_file).parent_path().string(), "scdino.stats_file");
  line("ro", k.control.token_file, "scdino.control.token_file");
  line("ro", k.control.tls_cert_file, "scdino.control.tls_cert_file");
  line("ro", k.control.tls_key_file, "scdino.control.tls_key_file");
  line("rw", c.meta.output_dir, "meta.output_dir");
  line("rw", c.file_sd_dir(), "scdino.metrics.file_sd_dir");
  return scdino::Status::Ok();
}

// check: the warnings, the metrics targets' folder against the shipped
// Prometheus's, and the verdict line.
void PrintCheck(const scdino::run::RunConfig& c, const std::string& file) {
  for (const auto& w : c.warnings) std::cerr << "scdino-config: " << file << ": " << w << "\n";
  if (c.scdino.metrics.enabled) {
    namespace fs = std::filesystem;
    const std::string sd = fs::absolute(c.file_sd_dir()).lexically_normal().string();
    if (sd != kShippedFileSdDir) {
      std::cerr << "scdino-config: " << file << ": warning: the metrics targets go to " << sd
                << " (scdino.metrics.file_sd_dir, else <meta.output_dir>/prometheus_targets), but the shipped "
                << "Prometheus reads " << kShippedFileSdDir << " (monitoring/prometheus/prometheus.yml): set "
                << "scdino.metrics.file_sd_dir: " << kShippedFileSdDir << ", or start the head node's stack with "
                << "scripts/monitoring-up.sh --sd-dir " << sd << "\n";
    }
  }
  std::cout << file << ": valid; run directory " << c.run_dir() << ", channels";
  for (auto ch : c.channels()) std::cout << " " << ch;
  std::cout << "\n";
}

// combinations: one line per channel combination (its run directory and
// its channels' names).
void PrintCombinations(const scdino::run::RunConfig& c) {
  namespace fs = std::filesystem;
  auto each = c;
  const auto n = static_cast<int64_t>(c.meta.selected_channel_combination_per_run.size());
  for (int64_t i = 0; i < n; ++i) {
    each.scdino.channel_combination = i;
    std::string names;
    for (const auto& [ch, name] : each.named_channels(i)) names += (names.empty() ? "" : " ") + name;
    std::cout << i << "\t" << fs::absolute(each.run_dir()).lexically_normal().string() << "\t" << names << "\n";
  }
}

// check: every combination against the images' channels, before anything
// queues; data not visible here (a login node without the data's file
// system) is said, not judged. The refusal, already written, or OK.
scdino::Status CheckAgainstTheImages(const scdino::run::RunConfig& c, const std::string& file) {
  auto first = scdino::run::FirstImageOf(c);
  const scdino::Status checked =
      first.ok() ? scdino::run::CheckCombinations(c, scdino::data::ProbeFirstImage(*first, c.image_prep()),
                                                  /*only_trained=*/false)
                 : first.status();
  if (checked.code() == scdino::StatusCode::kNotFound) {
    std::cerr << "scdino-config: " << file << ": the combinations' channels not checked against the images: "
              << checked.message() << "\n";
    return scdino::Status::Ok();
  }
  if (!checked.ok()) {  // CheckCombinations' messages start with the file
    std::cerr << "scdino-config: " << (first.ok() ? "" : file + ": ") << checked.message() << "\n";
  }
  return checked;
}

}  // namespace

int Main(int argc, char** argv) {
  scdino::cli::App app("scdino-config", "Check a run's config, or print the key reference (docs/config.md).\n" +
                                            scdino::process::ExitCodesHelp("scdino-config"));
  app->require_subcommand(1);
  std::string file;
  auto* check = app->add_subcommand("check", "validate a config file as every scdino service does");
  check->add_option("FILE", file, "the YAML config")->required();
  auto* paths = app->add_subcommand("paths",
                                    "list the paths a service of this config reads (ro) or writes (rw), one per "
                                    "line: ACCESS<TAB>ABSOLUTE_PATH<TAB>KEY");
  paths->add_option("FILE", file, "the YAML config")->required();
  bool shallow = false;
  paths->add_flag("--shallow", shallow,
                  "an index CSV by its folder only, without reading it for the folders of its images outside "
                  "it (a container probe's first look, before the CSV is mounted)");
  auto* combinations = app->add_subcommand(
      "combinations",
      "list the config's channel combinations, one run each, one per line: INDEX<TAB>RUN_DIRECTORY<TAB>CHANNELS "
      "(the array task that trains it: sbatch --array=0-<N-1>)");
  combinations->add_option("FILE", file, "the YAML config")->required();
  std::vector<std::string> settings;
  for (auto* sub : {check, paths, combinations}) {
    sub->add_option("--set", settings, "a key's value as the service is given it (KEY=VALUE; repeatable)")
        ->type_name("KEY=VALUE")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  app->add_subcommand("doc", "print the Markdown key reference of docs/config.md");
  bool shell = false;
  std::string program;
  auto* codes = app->add_subcommand("exit-codes", "print the exit-code table of docs/exit-codes.md");
  codes->add_flag("--shell", shell, "deploy/slurm/lib.sh's block instead: the codes and its requeue rules");
  codes->add_option("--program", program, "one program's --help line instead (e.g. scdino-trainer)")
      ->type_name("NAME");
  if (auto code = app.Parse(argc, argv)) return *code;
  if (app->got_subcommand("doc")) {
    std::cout << scdino::run::ConfigReference();
    return 0;
  }
  if (app->got_subcommand("exit-codes")) return PrintExitCodes(shell, program);
  auto c = scdino::run::LoadRunConfig(file, settings);
  if (!c.ok()) {
    std::cerr << "scdino-config: " << c.status().message() << "\n";
    return scdino::process::ExitCodeFor(c.status());
  }
  if (app->got_subcommand("combinations")) {
    PrintCombinations(*c);
    return 0;
  }
  if (app->got_subcommand("paths")) {
    if (auto s = PrintPaths(*c, file, shallow); !s.ok()) {
      std::cerr << "scdino-config: " << file << ": " << s.message() << "\n";
      return scdino::process::ExitCodeFor(s);
    }
    return 0;
  }
  if (auto s = CheckAgainstTheImages(*c, file); !s.ok()) return scdino::process::ExitCodeFor(s);
  PrintCheck(*c, file);
  return 0;
}

}  // namespace scdino::programs::config_main
