// scdino-synth: writes a class-folder TIFF data set of synthetic single cells
// (DIR/class_<k>/cell_<i>.tif, one page, channels interleaved, tifffile's
// shape description), whose class shows in morphology and per-channel
// intensity.
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "common/files.h"
#include "data/image_io.h"
#include "data/synthetic.h"

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"out", ""},     {"classes", "4"}, {"per-class", "64"}, {"channels", "5"},
                                          {"size", "50"}, {"seed", "0"},    {"bits", "8"},
                                          {"difficulty", "0"}};
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help" || k.rfind("--", 0) != 0 || !a.count(k.substr(2)) || i + 1 >= argc) {
      std::cerr << "usage: scdino-synth --out DIR [--classes K] [--per-class N] [--channels C] [--size S] [--seed X]"
                   " [--bits 8|16] [--difficulty 0..1]\n";
      return k == "-h" || k == "--help" ? 0 : 2;
    }
    a[k.substr(2)] = argv[++i];
  }
  scdino::data::SyntheticOptions o;
  try {
    o.classes = std::stoll(a["classes"]);
    o.per_class = std::stoll(a["per-class"]);
    o.channels = std::stoll(a["channels"]);
    o.size = std::stoll(a["size"]);
    o.seed = std::stoull(a["seed"]);
    o.difficulty = std::stod(a["difficulty"]);
  } catch (const std::exception&) {
    std::cerr << "scdino-synth: --classes, --per-class, --channels, --size and --seed expect integers, --difficulty a number\n";
    return 2;
  }
  const int bits = std::atoi(a["bits"].c_str());
  if (a["out"].empty() || o.classes < 1 || o.per_class < 1 || o.channels < 1 || o.size < 8 || (bits != 8 && bits != 16) ||
      !(o.difficulty >= 0 && o.difficulty <= 1)) {
    std::cerr << "scdino-synth: need --out DIR, classes/per-class/channels >= 1, size >= 8, bits 8 or 16, difficulty in [0, 1]\n";
    return 2;
  }
  torch::set_num_threads(1);
  int64_t written = 0;
  for (int64_t k = 0; k < o.classes; ++k) {
    const std::string dir = a["out"] + "/class_" + std::to_string(k);
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
            << o.size << " px, in " << o.classes << " class folders under " << a["out"] << "\n";
  return 0;
}
