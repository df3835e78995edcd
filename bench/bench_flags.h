// Command-line flags of the benchmarks: "--name value" pairs over defaults.
#pragma once

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

namespace scdino::bench {

class Flags {
 public:
  /// Exits with code 2 naming an unknown flag or one without a value.
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults) : v_(std::move(defaults)) {
    for (int i = 1; i < argc; i += 2) {
      const std::string k = argv[i];
      if (k.rfind("--", 0) != 0 || !v_.count(k.substr(2)) || i + 1 >= argc) {
        std::cerr << "unknown flag or missing value: " << k << " (flags:";
        for (const auto& [name, value] : v_) std::cerr << " --" << name << " [" << value << "]";
        std::cerr << ")\n";
        std::exit(2);
      }
      v_[k.substr(2)] = argv[i + 1];
    }
  }
  const std::string& str(const std::string& k) const { return v_.at(k); }
  int64_t num(const std::string& k) const {
    try {
      return std::stoll(v_.at(k));
    } catch (const std::exception&) {
      std::cerr << "--" << k << " expects an integer, got '" << v_.at(k) << "'\n";
      std::exit(2);
    }
  }

 private:
  std::map<std::string, std::string> v_;
};

}  // namespace scdino::bench
