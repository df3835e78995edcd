// A labelled image data set on disk for the tests that need real files:
// synthetic cells (data/synthetic.h) as 8-bit TIFFs, one folder per class.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "data/image_io.h"
#include "data/synthetic.h"

namespace scdino::testing {

/// Cells first..first + o.per_class - 1 of each of o.classes classes, as
/// `root/<prefix><class>/<i>.tif` (height x width x channels).
inline void WriteCellFolders(const std::string& root, const data::SyntheticOptions& o, const std::string& prefix,
                             int64_t first = 0) {
  for (int64_t k = 0; k < o.classes; ++k) {
    const std::string d = root + "/" + prefix + std::to_string(k);
    std::filesystem::create_directories(d);
    for (int64_t i = first; i < first + o.per_class; ++i) {
      auto hwc = (data::SyntheticCell(o, k, i).permute({1, 2, 0}) * 255).round().to(torch::kUInt8);
      ASSERT_TRUE(data::WriteTiff(d + "/" + std::to_string(i) + ".tif", hwc).ok()) << d << "/" << i << ".tif";
    }
  }
}

}  // namespace scdino::testing
