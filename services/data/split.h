// Train/test assignment of a data set's images for kNN evaluation, as
// scDINO's downstream analyses: a seeded, per-class random fraction, or the
// folders the images sit in (Training/ vs Test/). The assignment depends only
// on the data set and these options, so every service and rank agrees.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace scdino::data {

enum class Split : uint8_t { kTrain, kTest };
const char* SplitName(Split s);  ///< "train" | "test"

struct SplitOptions {
  /// Per class, round(fraction * images) are train (at least one and, with
  /// two or more images, at most all but one), chosen by a generator seeded
  /// with `seed`.
  double train_fraction = 0.8;
  uint64_t seed = 0;
  /// Non-empty: the first folder below the data set root decides instead
  /// (train_folder -> train, test_folder -> test, anything else is an error).
  std::string train_folder, test_folder;
};

/// One entry per data set entry, in the same order. InvalidArgument names
/// the first image outside both folders.
StatusOr<std::vector<Split>> AssignSplits(const Dataset& d, const SplitOptions& o);

}  // namespace scdino::data
