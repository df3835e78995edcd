#include "plan/source.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "common/files.h"
#include "common/fingerprint.h"
#include "common/progress.h"
#include "data/in_memory_source.h"
#include "data/loader.h"
#include "data/packed.h"
#include "data/sampler.h"
#include "data/synthetic.h"

namespace scdino::run {

data::DataSource DataSourceOf(const RunConfig& c, const std::function<const char*(const char*)>& env) {
  data::DataSource source;
  source.kind = c.scdino.data_source == "synthetic" ? data::DataSource::Kind::kSynthetic
                : c.scdino.data_source == "csv"     ? data::DataSource::Kind::kCsv
                                                    : data::DataSource::Kind::kFolder;
  source.index_csv = c.scdino.index_csv;
  source.dir = c.meta.dataset_dir;
  source.folder_depth_for_labels = c.meta.folder_depth_for_labels;
  source.on_bad_image = c.bad_image_policy();
  const char* stage_dir = env ? env("SCDINO_STAGE_DIR") : nullptr;
  if (stage_dir) source.stage_dir = stage_dir;
  return source;
}

StatusOr<data::Dataset> IndexDataset(const RunConfig& c, std::ostream* progress) {
  const data::DataSource source = DataSourceOf(c);
  auto d = data::OpenDataset(source, progress);
  // One class (a flat folder of unlabelled images, or one class folder):
  // training needs no labels, an evaluation does, and says so up front.
  if (d.ok() && d->classes.size() == 1 && progress) {
    *progress << "scdino: " << (c.scdino.data_source == "csv" ? c.scdino.index_csv : c.meta.dataset_dir)
              << ": one class ('" << d->classes[0] << "', " << d->entries.size()
              << " images): training needs no labels; the evaluation's kNN accuracy and per-class metrics "
                 "need two classes or more (class folders, or scdino.index_csv)\n";
  }
  return d;
}

std::string DatasetFingerprint(const data::Dataset& d, const data::ImagePrep& prep) {
  std::string key = "channels:";
  for (auto ch : prep.channels) key += std::to_string(ch) + ",";
  key += "|center_crop:" + std::to_string(prep.center_crop) + "|files:" + std::to_string(d.entries.size()) + "\n";
  const std::filesystem::path root(d.root);
  for (const auto& e : d.entries) key += std::filesystem::path(e.path).lexically_relative(root).string() + "\n";
  return Fingerprint(key);
}

Status CheckChannels(const data::Dataset& d, const data::ImagePrep& prep) {
  // A selection the image cannot satisfy is the run's error; unreadable
  // files are the loader's business (on_bad_image).
  const data::FirstImage first = data::ProbeFirstImage(d, prep);
  return first.prepared.code() == StatusCode::kInvalidArgument ? first.prepared : Status::Ok();
}

Status CheckCombinations(const RunConfig& c, const data::FirstImage& first, bool only_trained) {
  const int64_t count = first.raw_channels;
  const std::string& image = first.path;
  if (image.empty() && !first.unread.ok()) {
    return Status::NotFound("no image of the first ones reads here: " + first.unread.message());
  }
  if (image.empty()) return Status::Ok();
  const auto& all = c.meta.selected_channel_combination_per_run;
  for (size_t k = 0; k < all.size(); ++k) {
    if (only_trained && static_cast<int64_t>(k) != c.scdino.channel_combination) continue;
    for (const auto& [channel, name] : c.named_channels(static_cast<int64_t>(k))) {
      if (channel < count) continue;
      std::string entry;
      for (int64_t ch : all[k]) entry += "0123456789abcdef"[ch & 15];
      return Status::InvalidArgument(
          c.source_path + ": meta.selected_channel_combination_per_run[" + std::to_string(k) + "] (\"" + entry +
          "\") selects channel " + std::to_string(channel) + " (" + name + "), but the images have " +
          std::to_string(count) + " channel(s) (" + image + "): a combination names channels 0 to " +
          std::to_string(count - 1));
    }
  }
  return Status::Ok();
}

StatusOr<data::Dataset> FirstImageOf(const RunConfig& c) {
  namespace fs = std::filesystem;
  if (c.scdino.data_source == "synthetic") return data::Dataset{};
  if (c.scdino.data_source == "csv") return data::IndexCsv(c.scdino.index_csv);
  std::error_code ec;
  if (!fs::is_directory(c.meta.dataset_dir, ec)) {
    return Status::NotFound(c.meta.dataset_dir + " (meta.dataset_dir): not a folder here");
  }
  auto packed = data::OpenPackedSet(DataSourceOf(c));
  if (!packed.ok()) return packed.status();
  if (*packed) return data::DatasetOf(*packed);
  data::Dataset d;
  d.root = c.meta.dataset_dir;
  fs::recursive_directory_iterator it(c.meta.dataset_dir, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;  // a broken link is not the walk's error
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(type_ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(type_ec) && data::IsImageFile(it->path().string())) {
      d.entries.push_back({it->path().string(), 0});
      if (d.entries.size() == 16) break;
    }
  }
  if (ec) return Status::NotFound(c.meta.dataset_dir + " (meta.dataset_dir): " + ec.message());
  return d;
}

namespace {

StatusOr<data::ChannelStats> ComputeAndWrite(const RunConfig& c, const data::Dataset& d, const data::ImagePrep& prep,
                                             const std::string& fingerprint, const std::function<bool()>& should_stop) {
  data::StatsOptions so;
  so.should_stop = should_stop;
  so.fraction = c.train.fraction_for_mean_std_calc;
  so.seed = static_cast<uint64_t>(c.meta.seed);
  so.threads = static_cast<int>(std::max<int64_t>(1, c.train.num_workers));
  so.on_bad_image = c.bad_image_policy();
  ProgressLog progress(&std::cerr, "scdino: channel statistics", "images");
  so.on_progress = [&progress](int64_t done, int64_t total) { progress.Report(done, total); };
  auto s = data::ComputeChannelStats(d, prep, so);
  if (!s.ok()) return s.status();
  s->dataset_fingerprint = fingerprint;
  const std::string path = c.stats_path();
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    if (auto st = MakeDirs(dir.string()); !st.ok()) return st;
  }
  if (auto st = data::WriteStats(path, *s); !st.ok()) return st;
  return s;
}

// Why the statistics at `path` do not fit, or "" when they do.
std::string Mismatch(const data::ChannelStats& s, const data::ImagePrep& prep, const std::string& fingerprint) {
  if (s.channels != prep.channels) return "they are for other channels than this run's";
  if (s.dataset_fingerprint.empty()) return "they do not say which data set they are for (an older scdino wrote them)";
  if (s.dataset_fingerprint != fingerprint) {
    return "they are for another data set or preprocessing (fingerprint " + s.dataset_fingerprint +
           ", this run's is " + fingerprint + ")";
  }
  return "";
}

}  // namespace

namespace {

// With several combinations the statistics are shared (RunConfig::
// stats_path, or the file the user names): computed once over every channel the
// combinations use, as scDINO computes them, each run taking its own
// channels out of them (a channel's statistics do not depend on the
// others: each is min-maxed on its own).
bool SharedStats(const RunConfig& c, const data::ImagePrep& prep) {
  return c.meta.selected_channel_combination_per_run.size() > 1 && !prep.channels.empty();
}

data::ImagePrep StatsPrep(const RunConfig& c, const data::ImagePrep& prep) {
  if (!SharedStats(c, prep)) return prep;
  std::set<int64_t> used;
  for (const auto& combination : c.meta.selected_channel_combination_per_run) {
    used.insert(combination.begin(), combination.end());
  }
  data::ImagePrep all = prep;
  all.channels.assign(used.begin(), used.end());
  return all;
}

// `channels` out of statistics over more of them.
StatusOr<data::ChannelStats> Select(const data::ChannelStats& all, const std::vector<int64_t>& channels,
                                    const std::string& path) {
  data::ChannelStats out = all;
  out.channels = channels;
  out.mean.clear(), out.std.clear(), out.histogram.clear();
  for (int64_t ch : channels) {
    const auto at = std::find(all.channels.begin(), all.channels.end(), ch);
    const auto i = static_cast<size_t>(at - all.channels.begin());
    if (at == all.channels.end() || i >= all.mean.size() || i >= all.std.size()) {
      return Status::DataLoss(path + ": holds no statistics of channel " + std::to_string(ch));
    }
    out.mean.push_back(all.mean[i]);
    out.std.push_back(all.std[i]);
    if (i < all.histogram.size()) out.histogram.push_back(all.histogram[i]);
  }
  return out;
}

// The shared statistics' lock (<file>.lock, flock): the tasks of a job
// array start together, and one computes while the others wait and then
// read its file. Where the file system takes no locks each computes its
// own (the same numbers). Dropped when the process ends, however it ends.
class SharedStatsLock {
 public:
  SharedStatsLock() = default;
  SharedStatsLock(const SharedStatsLock&) = delete;
  SharedStatsLock& operator=(const SharedStatsLock&) = delete;
  ~SharedStatsLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Take(const std::string& path, const std::function<bool()>& should_stop) {
    const std::string lock = path + ".lock";
    if (auto s = MakeDirs(std::filesystem::path(lock).parent_path().string()); !s.ok()) return s;
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) return Status::IOError("cannot open " + lock + ": " + std::strerror(errno));
    bool said = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) return Status::Ok();
      if (err != EWOULDBLOCK) return Status::IOError("cannot lock " + lock + ": " + std::strerror(err));
      if (!said) {
        std::cerr << "scdino: waiting for " << path
                  << ": another combination's run is computing the channel statistics they share\n";
        said = true;
      }
      if (should_stop && should_stop()) return Status::Aborted("stopped while waiting for " + lock);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

// Rank 0's statistics: the file's when it fits this data and preprocessing
// (and a recompute was not asked for), else computed and written.
StatusOr<data::ChannelStats> LoadOrComputeHere(const RunConfig& c, const data::Dataset& d,
                                               const data::ImagePrep& prep, const std::string& fingerprint,
                                               bool shared, bool recompute, const std::function<bool()>& should_stop) {
  const std::string path = c.stats_path();
  SharedStatsLock lock;
  if (shared) {
    if (auto s = lock.Take(path, should_stop); !s.ok()) return s;
  }
  if (FileExists(path)) {
    if (auto own = CheckOwnPath(path, "the channel statistics file"); !own.ok()) return own;
  }
  if (!recompute && FileExists(path)) {
    auto s = data::ReadStats(path);
    const std::string why = s.ok() ? Mismatch(*s, prep, fingerprint) : s.status().message();
    if (why.empty()) return s;
    if (!c.scdino.stats_file.empty()) {
      return Status::FailedPrecondition(path + " (scdino.stats_file): not used: " + why +
                                        "; delete it to recompute, or point scdino.stats_file elsewhere");
    }
    std::cerr << "scdino: recomputing the channel statistics: " << path << ": " << why << "\n";
  }
  return ComputeAndWrite(c, d, prep, fingerprint, should_stop);
}

// Rank 0 loads or computes, then the other ranks read its file.
StatusOr<data::ChannelStats> LoadOrComputeFor(const RunConfig& c, const data::Dataset& d,
                                              const data::ImagePrep& prep, bool shared, bool recompute,
                                              Coordinator& coordinator, const std::function<bool()>& should_stop) {
  const std::string path = c.stats_path();
  const std::string fingerprint = DatasetFingerprint(d, prep);
  StatusOr<data::ChannelStats> result = data::ChannelStats{};
  if (coordinator.is_rank_zero()) {
    try {
      result = LoadOrComputeHere(c, d, prep, fingerprint, shared, recompute, should_stop);
    } catch (const std::exception& e) {
      result = Status::Internal(e.what());
    }
  }
  if (auto ready = coordinator.ShareOutcome("channel-statistics", result.status()); !ready.ok()) return ready;
  if (coordinator.is_rank_zero()) return result;
  if (auto own = CheckOwnPath(path, "the channel statistics file"); !own.ok()) return own;
  auto s = data::ReadStats(path);
  if (!s.ok()) return s.status();
  if (auto why = Mismatch(*s, prep, fingerprint); !why.empty()) return Status::FailedPrecondition(path + ": " + why);
  return s;
}

// The run's own channels: out of the shared file, or its file as it is.
StatusOr<data::ChannelStats> StatsOfRun(const RunConfig& c, const data::Dataset& d, const data::ImagePrep& prep,
                                        bool recompute, Coordinator& coordinator,
                                        const std::function<bool()>& should_stop) {
  const bool shared = SharedStats(c, prep);
  auto stats = LoadOrComputeFor(c, d, StatsPrep(c, prep), shared, recompute, coordinator, should_stop);
  if (!stats.ok() || !shared) return stats;
  return Select(*stats, prep.channels, c.stats_path());
}

}  // namespace

StatusOr<data::ChannelStats> LoadOrComputeStats(const RunConfig& c, const data::Dataset& d,
                                                const data::ImagePrep& prep, Coordinator& coordinator,
                                                const std::function<bool()>& should_stop) {
  return StatsOfRun(c, d, prep, /*recompute=*/false, coordinator, should_stop);
}

StatusOr<data::ChannelStats> RecomputeStats(const RunConfig& c, const data::Dataset& d, const data::ImagePrep& prep,
                                            Coordinator& coordinator) {
  return StatsOfRun(c, d, prep, /*recompute=*/true, coordinator, {});
}

StatusOr<DataShape> MeasureData(const RunConfig& c, const data::Dataset& dataset, const data::FirstImage& first,
                                int64_t ranks) {
  DataShape d;
  d.ranks = ranks;
  d.global_batch = c.train.batch_size_per_gpu * ranks;
  if (c.scdino.data_source == "synthetic") {
    const auto& s = c.scdino.synthetic;
    d.origin = d.first_image = "the synthetic data set (scdino.synthetic)";
    d.images = s.classes * s.per_class;
    d.height = d.width = s.size;
    d.channels = static_cast<int64_t>(c.channels().size());
    return d;
  }
  d.origin = c.scdino.data_source == "csv" ? c.scdino.index_csv : c.meta.dataset_dir;
  d.images = static_cast<int64_t>(dataset.entries.size());
  if (first.path.empty()) return first.unread.ok() ? Status::NotFound(d.origin + ": no images") : first.unread;
  if (!first.prepared.ok()) return first.prepared;
  d.first_image = first.path;
  d.channels = first.channels;
  d.height = first.height;
  d.width = first.width;
  return d;
}

Status MeasureFlips(const RunConfig& c, const data::Dataset& dataset, DataShape* shape,
                   const std::function<bool()>& should_stop) {
  const int64_t n = static_cast<int64_t>(dataset.entries.size());
  if (c.scdino.data_source == "synthetic" || n < 64 || shape->height <= 0 || shape->width <= 0) return Status::Ok();
  const int64_t queries = std::min<int64_t>(256, n / 4), wanted = std::min<int64_t>(1024, n - queries) + queries;
  std::vector<size_t> order(dataset.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(data::MixSeed({static_cast<uint64_t>(c.meta.seed), 0xf11e5ull}));
  std::shuffle(order.begin(), order.end(), rng);
  // At most 32 px a side: orientation is in the coarse layout, and the
  // distances stay a small matrix product.
  const double shrink = std::min(1.0, 32.0 / static_cast<double>(std::max(shape->height, shape->width)));
  const int64_t h = std::max<int64_t>(1, std::lround(shape->height * shrink));
  const int64_t w = std::max<int64_t>(1, std::lround(shape->width * shrink));
  const data::ImagePrep prep = c.image_prep();
  std::vector<torch::Tensor> rows;
  // Unreadable images are passed over, up to as many again as the sample.
  const size_t tries = std::min(order.size(), static_cast<size_t>(2 * wanted));
  for (size_t i = 0; i < tries && static_cast<int64_t>(rows.size()) < wanted; ++i) {
    if (should_stop && should_stop()) return Status::Aborted("stopped while measuring the images' orientation");
    auto img = data::LoadEntry(dataset, order[i], prep);
    if (!img.ok() || img->size(0) != shape->channels) continue;
    rows.push_back(torch::adaptive_avg_pool2d(img->unsqueeze(0), {h, w}));
  }
  if (static_cast<int64_t>(rows.size()) < wanted / 2) return Status::Ok();
  const auto all = torch::cat(rows).to(torch::kFloat64);
  const int64_t q = std::min<int64_t>(queries, all.size(0) / 4);
  const auto query = all.narrow(0, 0, q), refs = all.narrow(0, q, all.size(0) - q).flatten(1);
  const auto ref_sq = refs.pow(2).sum(1);
  // The median over the queries of the distance to the nearest reference.
  auto nearest = [&](const torch::Tensor& x) {
    const auto f = x.flatten(1);
    const auto d2 = f.pow(2).sum(1, true) + ref_sq.unsqueeze(0) - 2.0 * f.matmul(refs.t());
    return std::get<0>(d2.min(1)).clamp_min(0).sqrt().median().item<double>();
  };
  const double own = nearest(query);
  if (own <= 0) return Status::Ok();  // duplicates: no evidence either way
  shape->hflip_distance = nearest(query.flip({3})) / own;
  shape->vflip_distance = nearest(query.flip({2})) / own;
  shape->flip_sample = all.size(0);
  return Status::Ok();
}

StatusOr<std::unique_ptr<data::MultiCropSource>> MakeSource(const RunConfig& c, data::Dataset dataset,
                                                            Coordinator& coordinator, torch::Device device,
                                                            const std::function<bool()>& should_stop) {
  data::MultiCropOptions crops = c.multicrop_options();
  data::SamplerOptions sampler;
  sampler.batch_size = c.train.batch_size_per_gpu;
  sampler.rank = coordinator.rank();
  sampler.world_size = coordinator.world_size();
  sampler.seed = static_cast<uint64_t>(c.meta.seed);
  if (c.scdino.data_source == "synthetic") {
    auto set = data::MakeSyntheticSet(c.scdino.synthetic);
    auto images = set.images.index_select(1, torch::tensor(c.channels(), torch::kInt64)).contiguous();
    // Per-channel statistics of the in-memory images for normalisation.
    auto mean = images.mean({0, 2, 3}, false, torch::kFloat64);
    auto std = images.to(torch::kFloat64).std({0, 2, 3}).clamp_min(1e-6);
    for (int64_t i = 0; i < mean.size(0); ++i) {
      crops.mean.push_back(mean[i].item<double>());
      crops.std.push_back(std[i].item<double>());
    }
    std::unique_ptr<data::MultiCropSource> src =
        std::make_unique<data::InMemorySource>(images, set.labels, sampler, crops, device, set.class_names);
    return src;
  }
  if (coordinator.is_rank_zero()) {
    for (const auto& why : dataset.skipped) std::cerr << "scdino: skipping " << why << "\n";
  }
  const data::ImagePrep prep = c.image_prep();
  auto stats = LoadOrComputeStats(c, dataset, prep, coordinator, should_stop);
  if (!stats.ok()) return stats.status();
  crops.mean = stats->mean;
  crops.std = stats->std;
  data::LoaderOptions lo;
  const auto packed = dataset.packed;
  const std::string shuffle = c.scdino.shuffle == "auto" ? (packed ? "blocks" : "global") : c.scdino.shuffle;
  if (shuffle == "blocks") {
    if (!packed) {
      return Status::InvalidArgument("scdino.shuffle: blocks needs a packed data set (scdino-pack); " +
                                     c.meta.dataset_dir + " is not one (use global or auto)");
    }
    data::UseBlockShuffle(*packed, c.scdino.shuffle_buffer, &sampler);
  }
  // The class names, by rank 0, before any rank trains on their indices.
  Status classes = Status::Ok();
  if (coordinator.is_rank_zero()) {
    classes = MakeDirs(c.run_dir());
    if (classes.ok()) {
      classes = WriteFileAtomic(c.run_dir() + "/classes.json", nlohmann::json(dataset.classes).dump() + "\n");
    }
  }
  if (auto s = coordinator.ShareOutcome("classes", classes); !s.ok()) return s;
  lo.prep = prep;
  lo.sampler = sampler;
  lo.crops = crops;
  lo.threads = static_cast<int>(std::max<int64_t>(1, c.train.num_workers));
  lo.prefetch = static_cast<int>(c.scdino.prefetch_batches);
  lo.cache = c.scdino.cache_images;
  lo.cache_max_bytes = c.scdino.cache_max_mb << 20;
  lo.block_cache_max_bytes = c.scdino.block_cache_mb << 20;
  lo.on_bad_image = c.bad_image_policy();
  // A model that computes in bf16 or fp16 sees no more than float16 holds.
  lo.upload_dtype = c.precision(device) == model::Precision::kFp32 ? torch::kFloat32 : torch::kHalf;
  try {
    auto loader = std::make_unique<data::FileLoader>(std::move(dataset), lo, device);
    if (coordinator.is_rank_zero() && !loader->read_plan().empty()) {
      std::cerr << "scdino: packed set " << c.meta.dataset_dir << ": " << loader->read_plan() << "\n";
    }
    std::unique_ptr<data::MultiCropSource> src = std::move(loader);
    return src;
  } catch (const StatusError& e) {
    return e.status();
  }
}

}  // namespace scdino::run
