// The command line of every scdino executable, on CLI11: --help lists every
// flag with its default, --version prints the version, and a bad flag or
// value is reported as "<program>: <flag>: <what was wrong>" with exit code
// 2, the same in every service, tool and benchmark.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>

namespace scdino::cli {

/// Thread-compatible: used by a main before any other thread starts.
class App {
 public:
  App(const std::string& program, const std::string& description) : app_(description, program), program_(program) {
    app_.option_defaults()->always_capture_default();
    // Unknown arguments are reported by Parse before missing required ones
    // (CLI11 itself checks requirements first): a typo is the likelier cause.
    app_.allow_extras();
    app_.set_version_flag("--version", program + " " + SCDINO_VERSION);
    app_.failure_message([this](const CLI::App*, const CLI::Error& e) {
      return program_ + ": " + e.what() + "\n" + program_ + ": run with --help for every flag and its default\n";
    });
  }
  App(const App&) = delete;  // the failure message refers to this object
  App& operator=(const App&) = delete;
  CLI::App& operator*() { return app_; }
  CLI::App* operator->() { return &app_; }

  /// nullopt: go on; else the exit code to return now: 0 after --help or
  /// --version, 2 after a message naming the bad flag or value.
  std::optional<int> Parse(int argc, const char* const* argv, std::ostream& out = std::cout,
                           std::ostream& err = std::cerr) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--") break;
      if (a.size() > 2 && a.compare(0, 2, "--") == 0 && !Known(a.substr(0, a.find('=')))) {
        err << program_ << ": unknown argument '" << a << "'\n"
            << program_ << ": run with --help for every flag and its default\n";
        return 2;
      }
    }
    try {
      app_.parse(argc, argv);
      if (!app_.remaining().empty()) throw CLI::ExtrasError(app_.remaining());
    } catch (const CLI::ParseError& e) {
      const int code = app_.exit(e, out, err);
      return code == static_cast<int>(CLI::ExitCodes::Success) ? 0 : 2;
    }
    return std::nullopt;
  }

 private:
  // Whether `flag` ("--name") belongs to the app or one of its subcommands.
  bool Known(const std::string& flag) const {
    auto has = [&](const CLI::App* a) {
      for (const CLI::Option* o : a->get_options()) {
        for (const auto& name : o->get_lnames()) {
          if ("--" + name == flag) return true;
        }
      }
      return false;
    };
    if (has(&app_)) return true;
    for (const CLI::App* sub : app_.get_subcommands([](const CLI::App*) { return true; })) {
      if (has(sub)) return true;
    }
    return false;
  }

  CLI::App app_;
  std::string program_;
};

}  // namespace scdino::cli
