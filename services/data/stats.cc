#include "data/stats.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/files.h"
#include "common/parallel.h"
#include "data/sampler.h"

namespace scdino::data {

namespace {

// Per-channel sums, sums of squares and intensity histograms of images
// (channels x pixels, in [0, 1]).
struct Acc {
  std::vector<double> sum, sumsq;
  std::vector<std::vector<int64_t>> bins;
  int64_t pixels = 0, images = 0;

  void Size(size_t channels) {
    sum.assign(channels, 0.0), sumsq.assign(channels, 0.0);
    bins.assign(channels, std::vector<int64_t>(kIntensityBins, 0));
  }
  // One image; an image of another channel count than the first is left out.
  void Add(const torch::Tensor& x) {
    auto s = x.sum(1), sq = (x * x).sum(1);
    // Bin b holds [b, b + 1) / kIntensityBins; 1 goes to the last.
    auto bin = (x * static_cast<double>(kIntensityBins)).to(torch::kInt64).clamp(0, kIntensityBins - 1);
    auto offsets = torch::arange(x.size(0), torch::kInt64).unsqueeze(1) * kIntensityBins;
    auto counts = torch::bincount((bin + offsets).reshape({-1}), {}, x.size(0) * kIntensityBins).contiguous();
    const int64_t* count = counts.data_ptr<int64_t>();
    if (sum.empty()) Size(static_cast<size_t>(x.size(0)));
    if (static_cast<int64_t>(sum.size()) != x.size(0)) return;
    for (int64_t c = 0; c < x.size(0); ++c) {
      sum[c] += s[c].item<double>();
      sumsq[c] += sq[c].item<double>();
      for (int64_t b = 0; b < kIntensityBins; ++b) bins[c][b] += count[c * kIntensityBins + b];
    }
    pixels += x.size(1);
    images += 1;
  }
  void Merge(const Acc& a) {
    if (a.sum.empty()) return;
    if (sum.empty()) Size(a.sum.size());
    for (size_t c = 0; c < a.sum.size(); ++c) {
      sum[c] += a.sum[c];
      sumsq[c] += a.sumsq[c];
      for (int64_t b = 0; b < kIntensityBins; ++b) bins[c][b] += a.bins[c][b];
    }
    pixels += a.pixels;
    images += a.images;
  }
};

}  // namespace

StatusOr<ChannelStats> ComputeChannelStats(const Dataset& d, const ImagePrep& prep, const StatsOptions& o) {
  if (!(o.fraction > 0 && o.fraction <= 1)) {
    return Status::InvalidArgument("fraction_for_mean_std_calc: expected a number in (0, 1], got " +
                                   std::to_string(o.fraction));
  }
  const int64_t n = static_cast<int64_t>(d.entries.size());
  if (n == 0) {
    return Status::InvalidArgument("channel statistics of " + (d.root.empty() ? std::string("a data set") : d.root) +
                                   ": expected at least one image, the data set has none");
  }
  const int64_t take = std::max<int64_t>(1, static_cast<int64_t>(std::llround(o.fraction * n)));
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(MixSeed({o.seed, 0x57a75ull}));
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(take);

  const int threads = std::max(1, o.threads);
  std::vector<Acc> acc(threads);
  std::atomic<int64_t> next{0}, done{0};
  if (o.on_progress) o.on_progress(0, take);
  std::mutex err_mu;
  Status error;
  auto accumulate = [&](int t) {
    torch::InferenceMode guard;
    SerialOnThisThread();
    for (int64_t k = next++; k < take; k = next++) {
      if (o.should_stop && o.should_stop()) {
        std::lock_guard<std::mutex> l(err_mu);
        if (error.ok()) error = Status::Aborted("stopped while computing the channel statistics (nothing written)");
        next = take;
        return;
      }
      auto img = LoadEntry(d, static_cast<size_t>(order[k]), prep);
      if (o.on_progress) o.on_progress(++done, take);
      if (!img.ok()) {
        if (o.on_bad_image == BadImagePolicy::kSkip) continue;
        std::lock_guard<std::mutex> l(err_mu);
        if (error.ok()) error = img.status();
        next = take;
        return;
      }
      acc[t].Add(img->to(torch::kFloat64).reshape({img->size(0), -1}));
    }
  };
  auto work = [&](int t) {
    try {
      accumulate(t);
    } catch (const std::exception& e) {  // memory: the run's error, never the thread's end
      std::lock_guard<std::mutex> l(err_mu);
      if (error.ok()) error = Status::Internal("computing the channel statistics: " + std::string(e.what()));
      next = take;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (auto& th : pool) th.join();
  if (!error.ok()) return error;

  Acc total;
  for (const auto& a : acc) total.Merge(a);
  if (total.images == 0) return Status::InvalidArgument("no readable image among the " + std::to_string(take) + " sampled");
  ChannelStats s;
  s.channels = prep.channels;
  s.images = total.images;
  s.fraction = o.fraction;
  s.seed = o.seed;
  s.histogram = total.bins;
  for (size_t c = 0; c < total.sum.size(); ++c) {
    const double m = total.sum[c] / total.pixels;
    s.mean.push_back(m);
    // A channel constant over every sampled image has std 0; 1e-6 keeps the
    // normalisation finite (the channel is 0 after min-max anyway).
    s.std.push_back(std::max(1e-6, std::sqrt(std::max(0.0, total.sumsq[c] / total.pixels - m * m))));
  }
  return s;
}

std::string StatsToJson(const ChannelStats& s) {
  nlohmann::json j = {{"channels", s.channels}, {"mean", s.mean},         {"std", s.std},
                      {"images", s.images},     {"fraction", s.fraction}, {"seed", s.seed},
                      {"dataset_fingerprint", s.dataset_fingerprint}};
  if (!s.histogram.empty()) {
    j["histogram"] = {{"bins", kIntensityBins}, {"range", {0.0, 1.0}}, {"counts", s.histogram}};
  }
  return j.dump(2) + "\n";
}

Status WriteStats(const std::string& path, const ChannelStats& s) {
  const std::string text = StatsToJson(s);
  return WriteFileAtomic(path, text);
}

StatusOr<ChannelStats> ReadStats(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  ChannelStats s;
  try {
    s.channels = j.at("channels").get<std::vector<int64_t>>();
    s.mean = j.at("mean").get<std::vector<double>>();
    s.std = j.at("std").get<std::vector<double>>();
    s.images = j.value("images", int64_t{0});
    s.fraction = j.value("fraction", 0.2);
    s.seed = j.value("seed", uint64_t{0});
    s.dataset_fingerprint = j.value("dataset_fingerprint", "");
    if (j.contains("histogram")) {
      s.histogram = j.at("histogram").at("counts").get<std::vector<std::vector<int64_t>>>();
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": not a statistics file (expected channels, mean, std): " + e.what());
  }
  if (s.mean.size() != s.std.size() || s.mean.empty()) {
    return Status::InvalidArgument(path + ": mean and std must be non-empty lists of equal length");
  }
  for (double v : s.std) {
    if (!(v > 0)) return Status::InvalidArgument(path + ": std must be > 0, got " + std::to_string(v));
  }
  if (!s.histogram.empty()) {
    bool shaped = s.histogram.size() == s.mean.size();
    for (const auto& h : s.histogram) shaped = shaped && static_cast<int64_t>(h.size()) == kIntensityBins;
    if (!shaped) {
      return Status::InvalidArgument(path + ": histogram.counts must hold " + std::to_string(kIntensityBins) +
                                     " counts for each of the " + std::to_string(s.mean.size()) + " channels");
    }
  }
  return s;
}

}  // namespace scdino::data
