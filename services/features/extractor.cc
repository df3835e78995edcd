#include "features/extractor.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <future>
#include <iomanip>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "common/fingerprint.h"
#include "common/npy.h"
#include "features/anndata.h"
#include "features/feature_set.h"

namespace scdino::features {

namespace F = torch::nn::functional;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

torch::Tensor PrepareForModel(const torch::Tensor& chw, const FeaturePrep& prep) {
  auto x = chw.unsqueeze(0);
  if (prep.resize > 0 && (x.size(2) != prep.resize || x.size(3) != prep.resize)) {
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{prep.resize, prep.resize})
                              .mode(torch::kBilinear)
                              .align_corners(false));
  }
  x = x.squeeze(0);
  if (!prep.mean.empty()) {
    auto mean = torch::tensor(prep.mean, torch::kFloat32).view({-1, 1, 1});
    auto std = torch::tensor(prep.std, torch::kFloat32).view({-1, 1, 1});
    x = (x - mean) / std;
  }
  return x.contiguous();
}

StatusOr<torch::Tensor> LoadForModel(const data::Dataset& d, size_t i, const FeaturePrep& prep) {
  auto img = data::LoadEntry(d, i, prep.image);
  if (!img.ok()) return img.status();
  if (!prep.mean.empty() && static_cast<int64_t>(prep.mean.size()) != img->size(0)) {
    return Status::InvalidArgument(d.entries[i].path + ": " + std::to_string(img->size(0)) + " channels after selection, but the "
                                   "statistics have " + std::to_string(prep.mean.size()));
  }
  try {
    return PrepareForModel(*img, prep);
  } catch (const std::exception& e) {
    return Status::DataLoss(d.entries[i].path + ": cannot prepare for the model: " + e.what());
  }
}

std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int64_t shard_size) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t first = 0; first < n; first += shard_size) out.emplace_back(first, std::min(shard_size, n - first));
  return out;
}

namespace {

std::string ShardName(int64_t first, int64_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%09lld-%06lld", static_cast<long long>(first), static_cast<long long>(count));
  return buf;
}

// A shard is complete when its manifest names this job's fingerprint; the
// manifest is written after the array, so a half-written shard has none.
bool ShardComplete(const std::string& dir, int64_t first, int64_t count, const std::string& fingerprint) {
  auto text = ReadFile(dir + "/" + ShardName(first, count) + ".json");
  if (!text.ok()) return false;
  auto j = json::parse(*text, nullptr, false);
  return j.is_object() && j.contains("fingerprint") && j["fingerprint"] == fingerprint && j.contains("count") &&
         j["count"] == count && FileExists(dir + "/" + ShardName(first, count) + ".npy");
}

// Between batches: rank 0 follows its control API (and publishes its
// requests for the other ranks); the others follow rank 0's.
class Requests {
 public:
  explicit Requests(const ExtractOptions& o) : o_(o) {}

  /// Blocks while paused; true when the run should stop.
  bool StopOrWaitWhilePaused() {
    const auto signalled = [this] { return o_.stop_signal && o_.stop_signal(); };
    if (o_.control) {
      return o_.control->HoldWhilePaused([&] {
        if (o_.coordinator) o_.coordinator->Publish(o_.control->Requests());
        return signalled();
      });
    }
    if (!o_.coordinator) return signalled();
    for (RunRequests r = o_.coordinator->Latest(); !signalled(); r = o_.coordinator->Latest()) {
      if (r.stop) return true;
      if (!r.pause) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return true;
  }

 private:
  const ExtractOptions& o_;
};

// A batch of decoded images, and the ones left out as bad (skip).
struct LoadedBatch {
  torch::Tensor images;  ///< undefined when every image was bad
  std::vector<int64_t> skipped;  ///< data set indices
  std::vector<std::string> why;  ///< one message per skipped image
};

// Decodes images [first, first + count) on `threads` threads into one batch
// (in page-locked memory for a GPU: the copy then runs asynchronously). A bad
// image is the batch's error, or left out under on_bad_image: skip.
StatusOr<LoadedBatch> LoadBatch(const ExtractJob& job, int64_t first, int64_t count, int threads, bool pin,
                                data::BadImagePolicy on_bad) {
  std::vector<StatusOr<torch::Tensor>> images(static_cast<size_t>(count), Status::Internal("not loaded"));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int64_t i = t; i < count; i += threads) {
        images[static_cast<size_t>(i)] = LoadForModel(job.dataset, static_cast<size_t>(first + i), job.prep);
      }
    });
  }
  for (auto& w : workers) w.join();
  LoadedBatch out;
  std::vector<torch::Tensor> kept;
  for (int64_t i = 0; i < count; ++i) {
    auto& img = images[static_cast<size_t>(i)];
    if (!img.ok()) {
      if (on_bad == data::BadImagePolicy::kFail) return img.status();
      out.skipped.push_back(first + i);
      out.why.push_back(img.status().message());
      continue;
    }
    if (!kept.empty() && img->sizes() != kept[0].sizes()) {
      return Status::InvalidArgument(job.dataset.entries[static_cast<size_t>(first + i)].path + ": size " +
                                     c10::str(img->sizes()) + " differs from " + c10::str(kept[0].sizes()) +
                                     " of the batch; set downstream_analyses.compute_cls_features.resize: True");
    }
    kept.push_back(*img);
  }
  if (kept.empty()) return out;
  auto batch = torch::stack(kept);
  out.images = pin ? batch.pin_memory() : batch;
  return out;
}

Status Assemble(const ExtractJob& job, const ExtractOptions& o, const std::string& shard_dir,
                const std::string& fingerprint, int64_t n) {
  std::vector<torch::Tensor> parts;
  std::vector<bool> skipped(static_cast<size_t>(n), false);
  int64_t kept = 0;
  for (const auto& [first, count] : ShardRanges(n, o.shard_size)) {
    const std::string base = shard_dir + "/" + ShardName(first, count);
    auto manifest = ReadFile(base + ".json");
    if (!manifest.ok()) return manifest.status();
    int64_t left_out = 0;
    const json m = json::parse(*manifest, nullptr, false);
    const json none = json::array();
    for (const auto& i : m.is_object() && m.contains("skipped") ? m["skipped"] : none) {
      if (!i.is_number_integer() || i.get<int64_t>() < first || i.get<int64_t>() >= first + count) {
        return Status::DataLoss(base + ".json: skipped image " + i.dump() + " outside the shard; delete it and rerun");
      }
      skipped[static_cast<size_t>(i.get<int64_t>())] = true;
      ++left_out;
    }
    auto part = ReadNpy(base + ".npy");
    if (!part.ok()) return part.status();
    if (part->dim() != 2 || part->size(0) != count - left_out) {
      return Status::DataLoss(base + ".npy: expected " + std::to_string(count - left_out) + " rows, got shape " +
                              c10::str(part->sizes()) + "; delete it and rerun");
    }
    kept += part->size(0);
    if (part->size(0) > 0) parts.push_back(*part);
  }
  if (kept == 0) {
    return Status::InvalidArgument("every one of the " + std::to_string(n) +
                                   " images was bad (scdino.on_bad_image: skip): no features to write");
  }
  auto raw = torch::cat(parts);
  auto features = o.normalize ? F::normalize(raw, F::NormalizeFuncOptions().p(2).dim(1)) : raw;
  const int64_t d = raw.size(1);
  if (auto s = WriteNpy(o.out_dir + "/features.npy", features); !s.ok()) return s;
  if (o.write_raw) {
    if (auto s = WriteNpy(o.out_dir + "/features_raw.npy", raw); !s.ok()) return s;
  }
  std::vector<IndexRow> rows;
  rows.reserve(static_cast<size_t>(kept));
  json skipped_paths = json::array();
  const std::filesystem::path root(job.dataset.root);
  for (int64_t i = 0; i < n; ++i) {
    const auto& e = job.dataset.entries[static_cast<size_t>(i)];
    if (skipped[static_cast<size_t>(i)]) {
      skipped_paths.push_back(e.path);
      continue;
    }
    rows.push_back({e.path, job.dataset.classes.at(static_cast<size_t>(e.label)), e.label,
                    job.splits[static_cast<size_t>(i)]});
  }
  if (auto s = WriteFileAtomic(o.out_dir + "/index.csv", IndexCsv(rows)); !s.ok()) return s;

  json meta = json::parse(job.metadata_json);
  meta["format"] = "scdino-features-1";
  meta["scdino_version"] = SCDINO_VERSION;
  meta["checkpoint"] = {{"path", job.backbone.source},
                        {"key", job.backbone.key},
                        {"iteration", job.backbone.iteration},
                        {"epoch", job.backbone.epoch}};
  meta["model"] = json::parse(job.backbone.model_json);
  meta["n"] = kept;
  meta["skipped_images"] = skipped_paths;
  meta["dim"] = d;
  meta["normalized"] = o.normalize;
  meta["classes"] = job.dataset.classes;
  meta["dataset_root"] = job.dataset.root;
  meta["fingerprint"] = fingerprint;
  meta["files"] = {{"features", "features.npy"},
                   {"index", "index.csv"},
                   {"anndata", "features.h5ad"},
                   {"raw_features", o.write_raw ? "features_raw.npy" : ""}};

  AnnData a;
  a.n_obs = kept;
  a.n_vars = d;
  auto fc = features.contiguous();
  a.X.assign(fc.data_ptr<float>(), fc.data_ptr<float>() + fc.numel());
  ObsColumn path{"path", {}, {}, false}, cls{"class_name", {}, {}, true}, idx{"class_index", {}, {}, false},
      split{"split", {}, {}, true};
  for (const auto& r : rows) {
    auto rel = std::filesystem::path(r.path).lexically_relative(root);
    a.obs_names.push_back(rel.empty() ? r.path : rel.string());
    path.strings.push_back(r.path);
    cls.strings.push_back(r.class_name);
    idx.ints.push_back(r.class_index);
    split.strings.push_back(data::SplitName(r.split));
  }
  a.obs = {path, cls, idx, split};
  for (int64_t i = 0; i < d; ++i) a.var_names.push_back("cls_" + std::to_string(i));
  a.uns_strings = {{"scdino_metadata", meta.dump()},
                   {"checkpoint", job.backbone.source},
                   {"checkpoint_key", job.backbone.key},
                   {"model", job.backbone.model_json}};
  a.uns_numbers = {{"epoch", static_cast<double>(job.backbone.epoch)},
                   {"iteration", static_cast<double>(job.backbone.iteration)},
                   {"normalized", o.normalize ? 1.0 : 0.0}};
  if (auto s = WriteH5ad(o.out_dir + "/features.h5ad", a); !s.ok()) return s;
  // Last: its presence marks the directory complete.
  if (auto s = WriteFileAtomic(o.out_dir + "/metadata.json", meta.dump(2) + "\n"); !s.ok()) return s;
  (void)Env::Default()->RemoveTree(shard_dir);
  return Status::Ok();
}

}  // namespace

StatusOr<ExtractResult> ExtractFeatures(const ExtractJob& job, const ExtractOptions& o) {
  const int64_t n = static_cast<int64_t>(job.dataset.entries.size());
  if (static_cast<int64_t>(job.splits.size()) != n) {
    return Status::InvalidArgument("features: " + std::to_string(job.splits.size()) + " split entries for " +
                                   std::to_string(n) + " images");
  }
  if (o.batch_size < 1 || o.shard_size < 1 || o.threads < 1) {
    return Status::InvalidArgument("features: batch_size, shard_size and threads must be at least 1");
  }
  if (!(o.rank >= 0 && o.rank < o.world_size)) {
    return Status::InvalidArgument("features: rank " + std::to_string(o.rank) + " outside world size " +
                                   std::to_string(o.world_size));
  }
  ExtractResult result;
  std::ostringstream key;
  key << job.backbone.source << '|' << job.backbone.key << '|' << job.backbone.iteration << '|'
      << job.backbone.model_json << '|' << job.prep.resize << '|' << job.prep.image.center_crop << '|';
  for (auto c : job.prep.image.channels) key << c << ',';
  for (auto v : job.prep.mean) key << v << ',';
  for (auto v : job.prep.std) key << v << ',';
  key << (o.on_bad_image == data::BadImagePolicy::kSkip ? "skip|" : "fail|");
  for (const auto& e : job.dataset.entries) key << e.path << '\n';
  const std::string fingerprint = Fingerprint(key.str());
  const std::string shard_dir = o.out_dir + "/shards";
  if (auto s = MakeDirs(shard_dir); !s.ok()) return s;

  // A complete directory of the same job is left as it is.
  if (auto meta = ReadFile(o.out_dir + "/metadata.json"); meta.ok()) {
    auto j = json::parse(*meta, nullptr, false);
    if (j.is_object() && j.contains("fingerprint") && j["fingerprint"] == fingerprint) {
      result.completed = result.already_complete = true;
      if (o.on_progress) o.on_progress(n, n);
      return result;
    }
    if (o.rank == 0) {
      if (o.log) *o.log << "scdino-features: " << o.out_dir << " holds features of other inputs; replacing them\n";
      (void)Env::Default()->RemoveFile(o.out_dir + "/metadata.json");
    }
  }

  const auto shards = ShardRanges(n, o.shard_size);
  result.shards = static_cast<int64_t>(shards.size());
  auto images_complete = [&] {
    int64_t done = 0;
    for (const auto& [first, count] : shards) {
      if (ShardComplete(shard_dir, first, count, fingerprint)) done += count;
    }
    return done;
  };
  Requests requests(o);
  torch::NoGradGuard no_grad;
  const auto start = Clock::now();
  int64_t done_before = images_complete();
  for (size_t s = static_cast<size_t>(o.rank); s < shards.size(); s += static_cast<size_t>(o.world_size)) {
    const auto [first, count] = shards[s];
    if (ShardComplete(shard_dir, first, count, fingerprint)) {
      ++result.shards_skipped;
      continue;
    }
    std::vector<torch::Tensor> out;
    json skipped = json::array();
    auto load = [&](int64_t b) {
      const int64_t bf = first + b * o.batch_size;
      const int64_t bc = std::min(o.batch_size, first + count - bf);
      return std::async(std::launch::async,
                        [&job, bf, bc, t = o.threads, pin = o.device.is_cuda(), on_bad = o.on_bad_image] {
                          return LoadBatch(job, bf, bc, t, pin, on_bad);
                        });
    };
    const int64_t batches = (count + o.batch_size - 1) / o.batch_size;
    auto next = load(0);
    for (int64_t b = 0; b < batches; ++b) {
      auto batch = next.get();
      if (!batch.ok()) return batch.status();
      if (b + 1 < batches) next = load(b + 1);
      if (requests.StopOrWaitWhilePaused()) {
        if (b + 1 < batches) next.wait();
        result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        return result;
      }
      for (size_t k = 0; k < batch->skipped.size(); ++k) {
        skipped.push_back(batch->skipped[k]);
        if (o.log) *o.log << "scdino-features: skipping bad image: " << batch->why[k] << "\n";
      }
      result.images_skipped += static_cast<int64_t>(batch->skipped.size());
      if (!batch->images.defined()) continue;
      torch::Tensor cls;
      {
        model::AutocastGuard autocast(o.device, o.precision);
        cls = Embed(job.backbone, batch->images.to(o.device, /*non_blocking=*/true));
      }
      // Back to page-locked memory without waiting: the shard's write below
      // waits once for all of its batches.
      out.push_back(o.device.is_cuda()
                        ? cls.to(torch::kFloat32).to(torch::TensorOptions().device(torch::kCPU).pinned_memory(true),
                                                     /*non_blocking=*/true)
                        : cls.to(torch::kFloat32));
      result.images_written += batch->images.size(0);
      if (o.on_progress) o.on_progress(done_before + std::min(count, (b + 1) * o.batch_size), n);
    }
    if (o.device.is_cuda()) torch::cuda::synchronize();
    const std::string base = shard_dir + "/" + ShardName(first, count);
    if (auto st = WriteNpy(base + ".npy", out.empty() ? torch::zeros({0, 0}) : torch::cat(out)); !st.ok()) return st;
    json manifest = {{"first", first},   {"count", count},    {"fingerprint", fingerprint},
                     {"rank", o.rank},   {"skipped", skipped}};
    if (auto st = WriteFileAtomic(base + ".json", manifest.dump() + "\n"); !st.ok()) return st;
    ++result.shards_written;
    done_before = images_complete();
    if (o.on_progress) o.on_progress(done_before, n);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (o.rank != 0) {
    result.completed = true;  // rank 0 assembles
    return result;
  }
  // Rank 0 waits for the other ranks' shards; the clock restarts whenever
  // one arrives, so only a rank that stopped making progress times out.
  auto last_progress = Clock::now();
  for (int64_t have = images_complete(); have < n; have = images_complete()) {
    if (o.on_progress) o.on_progress(have, n);
    if (have != done_before) {
      done_before = have;
      last_progress = Clock::now();
    }
    if (requests.StopOrWaitWhilePaused()) return result;
    if (Clock::now() - last_progress > o.wait_timeout) {
      for (size_t s = 0; s < shards.size(); ++s) {
        if (!ShardComplete(shard_dir, shards[s].first, shards[s].second, fingerprint)) {
          return Status::Unavailable(shard_dir + "/" + ShardName(shards[s].first, shards[s].second) +
                                     " is missing after waiting " +
                                     std::to_string(o.wait_timeout.count() / 1000) + " s: rank " +
                                     std::to_string(s % static_cast<size_t>(o.world_size)) +
                                     " did not finish it; rerun to resume (complete shards are kept)");
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (o.control) o.control->Update([](RunStatus& s) { s.state = RunState::kCheckpointing; });
  if (auto s = Assemble(job, o, shard_dir, fingerprint, n); !s.ok()) return s;
  if (o.on_progress) o.on_progress(n, n);
  result.completed = true;
  return result;
}

}  // namespace scdino::features
