#include "data/split.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

namespace scdino::data {

const char* SplitName(Split s) { return s == Split::kTrain ? "train" : "test"; }

namespace {

StatusOr<std::vector<Split>> ByFolder(const Dataset& d, const SplitOptions& o) {
  namespace fs = std::filesystem;
  std::vector<Split> out;
  out.reserve(d.entries.size());
  const fs::path root = fs::path(d.root).lexically_normal();
  for (const auto& e : d.entries) {
    const fs::path rel = fs::path(e.path).lexically_normal().lexically_relative(root);
    const std::string first = rel.empty() ? "" : rel.begin()->string();
    if (first == o.train_folder) {
      out.push_back(Split::kTrain);
    } else if (first == o.test_folder) {
      out.push_back(Split::kTest);
    } else {
      return Status::InvalidArgument(e.path + ": scdino.split.mode is folders, so every image must lie under " +
                                     d.root + "/" + o.train_folder + " or " + d.root + "/" + o.test_folder +
                                     "; this one is under '" + first + "'");
    }
  }
  return out;
}

}  // namespace

StatusOr<std::vector<Split>> AssignSplits(const Dataset& d, const SplitOptions& o) {
  if (!o.train_folder.empty() || !o.test_folder.empty()) return ByFolder(d, o);
  if (!(o.train_fraction > 0.0 && o.train_fraction <= 1.0)) {
    return Status::InvalidArgument("train fraction: expected a value in (0, 1], got " +
                                   std::to_string(o.train_fraction));
  }
  std::vector<std::vector<size_t>> by_class(d.classes.size());
  for (size_t i = 0; i < d.entries.size(); ++i) {
    const int64_t label = d.entries[i].label;
    if (label < 0 || label >= static_cast<int64_t>(by_class.size())) {
      return Status::InvalidArgument(d.entries[i].path + ": class index " + std::to_string(label) +
                                     " is outside the " + std::to_string(by_class.size()) + " classes");
    }
    by_class[static_cast<size_t>(label)].push_back(i);
  }
  std::vector<Split> out(d.entries.size(), Split::kTest);
  // One generator per class, seeded from (seed, class), so adding images of
  // one class does not reshuffle another.
  for (size_t c = 0; c < by_class.size(); ++c) {
    auto& members = by_class[c];
    if (members.empty()) continue;
    std::mt19937_64 rng(o.seed * 1000003u + c);
    std::shuffle(members.begin(), members.end(), rng);
    const auto n = static_cast<int64_t>(members.size());
    int64_t train = std::llround(o.train_fraction * static_cast<double>(n));
    train = std::max<int64_t>(1, train);
    if (n >= 2 && o.train_fraction < 1.0) train = std::min(train, n - 1);
    for (int64_t i = 0; i < train; ++i) out[members[static_cast<size_t>(i)]] = Split::kTrain;
  }
  return out;
}

}  // namespace scdino::data
