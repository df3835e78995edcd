// Command-line flags of the benchmarks on the shared CLI (common/cli.h):
// "--name value" over documented defaults, --help (each flag with what it
// means and its default) and --version as in every scdino executable, exit
// code 2 naming a bad flag or value.
#pragma once

#include <cstdlib>
#include <iostream>
#include <vector>
#include <string>

#include "common/cli.h"

namespace scdino::bench {

/// One flag: its name (without --), its default and what it means, as
/// --help shows them.
struct Flag {
  std::string name, value, help;
};

class Flags {
 public:
  /// Exits at once after --help/--version (0) or a bad command line (2).
  /// Every flag says what it means: one without its help exits 2, naming it.
  Flags(int argc, char** argv, const std::string& program, const std::string& description, std::vector<Flag> flags)
      : program_(program), flags_(std::move(flags)) {
    cli::App app(program, description);
    for (auto& f : flags_) {
      if (f.help.empty()) {
        std::cerr << program << ": --" << f.name << " has no help text (bench/bench_flags.h)\n";
        std::exit(2);
      }
      app->add_option("--" + f.name, f.value, f.help)->capture_default_str();
    }
    if (auto code = app.Parse(argc, argv)) std::exit(*code);
  }
  const std::string& str(const std::string& k) const {
    for (const auto& f : flags_) {
      if (f.name == k) return f.value;
    }
    std::cerr << program_ << ": no flag --" << k << " (a bench asked for one it does not declare)\n";
    std::exit(2);
  }
  int64_t num(const std::string& k) const {
    const std::string& v = str(k);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') {
      std::cerr << program_ << ": --" << k << ": expected an integer, got '" << v << "'\n";
      std::exit(2);
    }
    return x;
  }

 private:
  std::string program_;
  std::vector<Flag> flags_;
};

}  // namespace scdino::bench
