// Command-line flags of the benchmarks on the shared CLI (common/cli.h):
// "--name value" over documented defaults, --help and --version as in every
// scdino executable, exit code 2 naming a bad flag or value.
#pragma once

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "common/cli.h"

namespace scdino::bench {

class Flags {
 public:
  /// Exits at once after --help/--version (0) or a bad command line (2).
  Flags(int argc, char** argv, const std::string& program, const std::string& description,
        std::map<std::string, std::string> defaults)
      : program_(program), v_(std::move(defaults)) {
    cli::App app(program, description);
    for (auto& [name, value] : v_) app->add_option("--" + name, value);
    if (auto code = app.Parse(argc, argv)) std::exit(*code);
  }
  const std::string& str(const std::string& k) const { return v_.at(k); }
  int64_t num(const std::string& k) const {
    const std::string& v = v_.at(k);
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
  std::map<std::string, std::string> v_;
};

}  // namespace scdino::bench
