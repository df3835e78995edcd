// The command-line programs, each one's main as a function. The programs'
// own files (services/*/main.cc, services/tools/*_main.cc) only call these:
// they include no LibTorch header, so they compile in a moment, and the
// bodies compile together in this library's few translation units, which
// pay for LibTorch's precompiled header once rather than once per program
// (docs/performance.md, "Thin mains").
#pragma once

namespace scdino::programs {
namespace trainer_main { int Main(int argc, char** argv); }   // scdino-trainer
namespace features_main { int Main(int argc, char** argv); }  // scdino-features
namespace eval_main { int Main(int argc, char** argv); }      // scdino-eval
namespace synth_main { int Main(int argc, char** argv); }     // scdino-synth
namespace stats_main { int Main(int argc, char** argv); }     // scdino-stats
namespace pack_main { int Main(int argc, char** argv); }      // scdino-pack
namespace config_main { int Main(int argc, char** argv); }    // scdino-config
namespace export_main { int Main(int argc, char** argv); }    // scdino-export
}  // namespace scdino::programs
