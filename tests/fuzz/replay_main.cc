// Replays inputs through one fuzz target, without libFuzzer: every file
// given, and every file under a directory given. Prints how many ran; any
// crash or sanitizer report ends it, naming the input first. Inputs after
// --seeds must also be accepted by the reader (a corpus covers what it
// accepts); inputs after --found (crash inputs) may be refused.
//
//   scdino-fuzz-replay TARGET --seeds PATH... [--found PATH...]
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::cerr << "usage: scdino-fuzz-replay tiff|safetensors|npy|packed|config PATH...\n";
    return 2;
  }
  const auto target = scdino::fuzz::TargetNamed(argv[1]);
  if (target == nullptr) {
    std::cerr << "scdino-fuzz-replay: no target '" << argv[1] << "'\n";
    return 2;
  }
  std::vector<std::pair<std::string, bool>> inputs;  // path, must be accepted
  bool seeds = true;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    const std::string arg = argv[i];
    if (arg == "--seeds" || arg == "--found") {
      seeds = arg == "--seeds";
    } else if (fs::is_directory(arg, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(arg)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') inputs.emplace_back(e.path().string(), seeds);
      }
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.emplace_back(arg, seeds);
    } else {
      std::cerr << "scdino-fuzz-replay: " << argv[i] << ": no such file or directory\n";
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  int refused_seeds = 0;
  for (const auto& [path, seed] : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::cerr << "input " << path << " (" << bytes.size() << " bytes)\n";
    target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (seed && !scdino::fuzz::LastInputAccepted()) {
      std::cerr << "FAIL: seed " << path << " is refused by the reader: a corpus seed must be accepted\n";
      ++refused_seeds;
    }
  }
  scdino::fuzz::RemoveScratch();
  std::cout << "scdino-fuzz-replay " << argv[1] << ": " << inputs.size() << " inputs, none crashed\n";
  return inputs.empty() || refused_seeds > 0 ? 1 : 0;
}
