// Per-channel normalisation statistics over a seeded random fraction of the
// training images (scDINO's fraction_for_mean_std_calc), after the same
// preprocessing the loader applies, accumulated in double precision on
// several threads. The same pass counts each channel's intensities in a
// histogram, which the evaluation report draws.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace scdino::data {

/// Bins of the intensity histograms, equal widths over [0, 1] (the
/// prepared images' range; 1 falls in the last bin).
constexpr int64_t kIntensityBins = 32;

struct ChannelStats {
  std::vector<int64_t> channels;  ///< the selected channel indices
  std::vector<double> mean, std;  ///< per selected channel, over all pixels
  /// Per selected channel, pixels in each of kIntensityBins bins; empty in
  /// files of older versions.
  std::vector<std::vector<int64_t>> histogram;
  int64_t images = 0;             ///< images used
  double fraction = 0.2;
  uint64_t seed = 0;
  /// Which data set and preprocessing the statistics are for (see
  /// run::DatasetFingerprint); empty in files of older versions.
  std::string dataset_fingerprint;
};

struct StatsOptions {
  double fraction = 0.2;
  uint64_t seed = 0;
  int threads = 2;
  BadImagePolicy on_bad_image = BadImagePolicy::kFail;
  /// Checked before each image; true ends the computation with Aborted.
  std::function<bool()> should_stop;
  /// Called after each image with (images done, images to read), from the
  /// worker threads (it must be thread-safe).
  std::function<void(int64_t, int64_t)> on_progress;
};

StatusOr<ChannelStats> ComputeChannelStats(const Dataset& d, const ImagePrep& prep, const StatsOptions& o);

std::string StatsToJson(const ChannelStats& s);
StatusOr<ChannelStats> ReadStats(const std::string& path);
Status WriteStats(const std::string& path, const ChannelStats& s);

}  // namespace scdino::data
