// scdino-synth: writes a class-folder TIFF data set of synthetic single cells
// (DIR/class_<k>/cell_<i>.tif, one page, channels interleaved, tifffile's
// shape description), whose class shows in morphology and per-channel
// intensity.
#include <cstdio>
#include <iostream>
#include <string>

#include "common/cli.h"
#include "common/files.h"
#include "data/image_io.h"
#include "data/synthetic.h"
#include "programs/mains.h"

namespace scdino::programs::synth_main {

int Main(int argc, char** argv) {
  std::string out;
  int bits = 8;
  scdino::data::SyntheticOptions o;
  scdino::cli::App app("scdino-synth", "A synthetic data set of multi-channel cells as TIFF files in class folders.");
  app->add_option("--out", out, "the data set's root directory")->required()->type_name("DIR");
  app->add_option("--classes", o.classes, "classes")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app->add_option("--per-class", o.per_class, "images per class")->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  app->add_option("--channels", o.channels, "channels per image")->check(CLI::Range(int64_t{1}, int64_t{64}));
  app->add_option("--size", o.size, "image side in pixels")->check(CLI::Range(int64_t{8}, int64_t{4096}));
  app->add_option("--seed", o.seed, "seed of every random draw");
  app->add_option("--bits", bits, "bits per sample")->check(CLI::IsMember({8, 16}));
  app->add_option("--difficulty", o.difficulty,
                  "0: classes differ plainly; towards 1 the nuisances (position, size, noise) dominate")
      ->check(CLI::Range(0.0, 1.0));
  if (auto code = app.Parse(argc, argv)) return *code;
  torch::set_num_threads(1);
  int64_t written = 0;
  for (int64_t k = 0; k < o.classes; ++k) {
    const std::string dir = out + "/class_" + std::to_string(k);
    if (auto s = scdino::MakeDirs(dir); !s.ok()) {
      std::cerr << "scdino-synth: " << s.message() << "\n";
      return 1;
    }
    for (int64_t i = 0; i < o.per_class; ++i) {
      auto chw = scdino::data::SyntheticCell(o, k, i);
      const double scale = bits == 8 ? 255.0 : 65535.0;
      auto hwc = (chw.permute({1, 2, 0}) * scale).round().to(bits == 8 ? torch::kUInt8 : torch::kInt32);
      char name[32];
      std::snprintf(name, sizeof name, "/cell_%05lld.tif", static_cast<long long>(i));
      if (auto s = scdino::data::WriteTiff(dir + name, hwc); !s.ok()) {
        std::cerr << "scdino-synth: " << s.message() << "\n";
        return 1;
      }
      ++written;
    }
  }
  std::cerr << "scdino-synth: wrote " << written << " images of " << o.channels << " channels, " << o.size << "x"
            << o.size << " px, in " << o.classes << " class folders under " << out << "\n";
  return 0;
}

}  // namespace scdino::programs::synth_main
